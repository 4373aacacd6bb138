//! What to tell a user whose kernel backend cannot use the module: the commands that fix
//! it on this machine, chosen from what `/lib/modules/<release>` holds (as `modprobe`
//! would find the module) and written as README.md's "Install" and docs/module.md give
//! them: the Debian package of the right version first (`pfprof-dkms` for the module,
//! `pfprof` for the monitor, both of one version), then the build from a checkout.

use std::fs;
use std::path::Path;

/// The version of the packages, the module (`modinfo`) and this monitor, by which DKMS
/// knows the module's source: the workspace's, which kmod/dkms.conf's PACKAGE_VERSION and
/// debian/changelog's newest entry repeat (a test keeps them equal).
pub const DKMS_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where a loaded module says its version (its `MODULE_VERSION`, the package's).
pub const MODULE_VERSION_FILE: &str = "/sys/module/pfprof/version";

/// Where kernels keep their modules and, in `build`, their headers.
pub const MODULES_DIR: &str = "/lib/modules";

/// The running kernel's release (`uname -r`).
pub fn running_release() -> Option<String> {
    nix::sys::utsname::uname()
        .ok()
        .and_then(|u| u.release().to_str().map(str::to_owned))
}

/// How to build, install and load the module with DKMS from the pfprof source.
fn dkms_commands(release: &str) -> String {
    format!(
        "sudo make -C kmod dkms-src && sudo dkms install pfprof/{DKMS_VERSION} -k {release} \
         && sudo modprobe pfprof"
    )
}

/// How to install the module from the package of this monitor's version, which builds it
/// with DKMS.
fn package_command() -> String {
    format!("sudo apt install ./pfprof-dkms_{DKMS_VERSION}_all.deb")
}

/// The device does not exist: load the module if it is installed for `release`, else
/// install it with DKMS, after the kernel's headers if they are missing too.
pub fn when_not_loaded(modules_dir: &Path, release: &str) -> String {
    let kernel = modules_dir.join(release);
    // modprobe looks the module up in modules.dep, which DKMS's depmod rewrote.
    let installed = fs::read_to_string(kernel.join("modules.dep")).is_ok_and(|dep| {
        dep.lines().any(|line| {
            let module = line.split(':').next().unwrap_or("");
            Path::new(module)
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name == "pfprof.ko" || name.starts_with("pfprof.ko."))
        })
    });
    if installed {
        "load the module: sudo modprobe pfprof".into()
    } else if kernel.join("build").exists() {
        format!("install the module: {}", install_commands(release))
    } else {
        format!(
            "the module is built against the running kernel's headers, which are missing: \
             install them (Debian, Ubuntu: sudo apt install linux-headers-{release}), then \
             the module: {}",
            install_commands(release)
        )
    }
}

/// The package of this monitor's version, or DKMS from the pfprof source.
fn install_commands(release: &str) -> String {
    format!(
        "the package pfprof-dkms {DKMS_VERSION} builds it with DKMS \
         ({} && sudo modprobe pfprof), or from the pfprof source: {}",
        package_command(),
        dkms_commands(release)
    )
}

/// The module speaks an older ABI than this monitor: replace it with the module of the
/// monitor's version, from its package or from the same source as the monitor.
pub fn when_module_older(release: &str) -> String {
    format!(
        "install the module of this monitor's version, pfprof-dkms {DKMS_VERSION}: \
         {package} && sudo modprobe -r pfprof && sudo modprobe pfprof; \
         or replace it with one built from this monitor's source: \
         sudo dkms remove pfprof/{DKMS_VERSION} --all; sudo rm -r /usr/src/pfprof-{DKMS_VERSION}; \
         {dkms} (or, by hand: make -C kmod && sudo rmmod pfprof && sudo insmod kmod/pfprof.ko)",
        package = package_command(),
        dkms = dkms_commands(release).replace(
            "&& sudo modprobe pfprof",
            "&& sudo modprobe -r pfprof && sudo modprobe pfprof"
        ),
    )
}

/// The module speaks a newer ABI than this monitor: install the monitor of the module's
/// version, `module_version` (what [`loaded_module_version`] read), when it says one.
pub fn when_module_newer(module_version: Option<&str>) -> String {
    match module_version {
        Some(version) => format!(
            "install the monitor of the module's version, pfprof {version}: \
             sudo apt install ./pfprof_{version}_*.deb"
        ),
        None => "install the pfprof package of the module's version".into(),
    }
}

/// The version the loaded module says in `file` ([`MODULE_VERSION_FILE`]), if it says one
/// (modules built before the packages had none).
pub fn loaded_module_version(file: &Path) -> Option<String> {
    let text = fs::read_to_string(file).ok()?;
    let version = text.trim();
    // A version as the packages spell theirs, nothing a terminal would act on.
    let plain = !version.is_empty()
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".+~-".contains(c));
    plain.then(|| version.to_owned())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// A scratch /lib/modules with a kernel 7.3.4-cloud holding `files`.
    fn kernel_dir(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("pfprof-install-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let kernel = dir.join("7.3.4-cloud");
        fs::create_dir_all(&kernel).unwrap();
        for (name, text) in files {
            let path = kernel.join(name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn an_installed_module_is_only_to_be_loaded() {
        let dir = kernel_dir("installed", &[(
            "modules.dep",
            "kernel/fs/ext4/ext4.ko.xz: kernel/fs/jbd2/jbd2.ko.xz\nupdates/dkms/pfprof.ko.xz:\n",
        )]);
        let advice = when_not_loaded(&dir, "7.3.4-cloud");
        assert_eq!(advice, "load the module: sudo modprobe pfprof");
    }

    #[test]
    fn with_headers_and_no_module_dkms_installs_it_for_the_running_kernel() {
        let dir = kernel_dir(
            "headers",
            &[
                ("modules.dep", "kernel/fs/pfprofx.ko:\n"),
                ("build/Makefile", ""),
            ],
        );
        let advice = when_not_loaded(&dir, "7.3.4-cloud");
        assert!(
            advice.contains("sudo dkms install pfprof/0.3.0 -k 7.3.4-cloud"),
            "{advice}"
        );
        assert!(
            advice.contains("sudo apt install ./pfprof-dkms_0.3.0_all.deb"),
            "{advice}"
        );
        assert!(!advice.contains("headers"), "{advice}");
    }

    #[test]
    fn without_headers_the_headers_package_comes_first() {
        let dir = kernel_dir("bare", &[]);
        let advice = when_not_loaded(&dir, "7.3.4-cloud");
        assert!(
            advice.contains("sudo apt install linux-headers-7.3.4-cloud"),
            "{advice}"
        );
        assert!(advice.contains("dkms install"), "{advice}");
    }

    #[test]
    fn an_older_module_is_removed_before_the_new_one_is_installed_and_reloaded() {
        let advice = when_module_older("6.12.1");
        let remove = advice.find("dkms remove pfprof/0.3.0 --all").unwrap();
        let install = advice.find("dkms install pfprof/0.3.0 -k 6.12.1").unwrap();
        let reload = advice
            .rfind("modprobe -r pfprof && sudo modprobe pfprof")
            .unwrap();
        assert!(remove < install && install < reload, "{advice}");
    }

    #[test]
    fn an_older_module_is_replaced_by_the_package_of_the_monitors_version_first() {
        let advice = when_module_older("6.12.1");
        let package = advice
            .find("sudo apt install ./pfprof-dkms_0.3.0_all.deb && sudo modprobe -r pfprof")
            .unwrap();
        assert!(package < advice.find("dkms remove").unwrap(), "{advice}");
    }

    #[test]
    fn a_newer_module_names_the_monitors_package_of_its_own_version() {
        assert_eq!(
            when_module_newer(Some("0.3.0")),
            "install the monitor of the module's version, pfprof 0.3.0: \
             sudo apt install ./pfprof_0.3.0_*.deb"
        );
        assert_eq!(
            when_module_newer(None),
            "install the pfprof package of the module's version"
        );
    }

    #[test]
    fn the_loaded_modules_version_is_read_as_plain_text_only() {
        let dir = kernel_dir("version", &[]);
        let file = dir.join("version");
        assert_eq!(loaded_module_version(&file), None);
        fs::write(&file, "0.3.0\n").unwrap();
        assert_eq!(loaded_module_version(&file).as_deref(), Some("0.3.0"));
        fs::write(&file, "0.3.0; rm -rf ~\n").unwrap();
        assert_eq!(loaded_module_version(&file), None);
    }

    #[test]
    fn the_changelogs_newest_entry_is_this_version() {
        let changelog = include_str!("../../../debian/changelog");
        let newest = changelog.lines().next().unwrap_or_default();
        assert!(
            newest.starts_with(&format!("pfprof ({DKMS_VERSION}) ")),
            "{newest}"
        );
    }

    #[test]
    fn the_dkms_version_is_the_one_dkms_conf_names() {
        let conf = include_str!("../../../kmod/dkms.conf");
        assert!(
            conf.contains(&format!("PACKAGE_VERSION=\"{DKMS_VERSION}\"")),
            "{conf}"
        );
    }
}
