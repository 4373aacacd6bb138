//! Swap on zram, for the tests whose workloads must page.

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Context, Result};

const MIB: u64 = 1 << 20;

const ZRAM: &str = "/sys/block/zram0";

/// Swap on a zram device for as long as it lives.
pub(crate) struct ZramSwap;

impl ZramSwap {
    /// Loads zram ([`load_zram`]) and swaps on `mib` of it.
    pub(crate) fn on(mib: u64) -> Result<ZramSwap> {
        load_zram()?;
        fs::write(format!("{ZRAM}/disksize"), format!("{}", mib * MIB))
            .context("setting the zram disk size")?;
        let swap = ZramSwap;
        sh(&["mkswap", "/dev/zram0"])?;
        sh(&["swapon", "/dev/zram0"])?;
        Ok(swap)
    }
}

/// Loads zram (the modules run.sh put in /modules, in their order, on a kernel that has
/// it as a module): /dev/zram0 and /sys/class/zram-control then exist.
pub(crate) fn load_zram() -> Result<()> {
    if let Ok(order) = fs::read_to_string("/modules/order") {
        for module in order.lines() {
            // Loaded already by an earlier test: EEXIST.
            let _ = Command::new("insmod")
                .arg(format!("/modules/{module}.ko"))
                .status()?;
        }
    }
    ensure!(
        Path::new(ZRAM).exists(),
        "no {ZRAM}: this kernel has no zram (CONFIG_ZRAM), or run.sh did not stage it"
    );
    Ok(())
}

impl Drop for ZramSwap {
    fn drop(&mut self) {
        let _ = Command::new("swapoff").arg("/dev/zram0").status();
        let _ = fs::write(format!("{ZRAM}/reset"), "1");
    }
}

/// Runs `args`, which must succeed.
pub(crate) fn sh(args: &[&str]) -> Result<()> {
    let out = Command::new(args[0]).args(&args[1..]).output()?;
    ensure!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}
