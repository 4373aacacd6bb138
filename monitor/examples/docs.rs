//! The man pages and shell completions of the Debian package (debian/rules runs it), made
//! from the binaries' own command lines (`monitor::cli`) under the names the package
//! installs them by, `pfprof` and `pfprof-work`:
//!
//!     cargo run -p monitor --example docs -- DIR
//!
//! writes DIR/man/pfprof.1, pfprof-run.1 and pfprof-work.1, and DIR/completions/ for bash
//! (pfprof.bash), zsh (_pfprof) and fish (pfprof.fish), each for both commands.

use std::fs;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap_complete::Shell;
use monitor::cli;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        bail!("usage: docs DIR (the man pages go to DIR/man, the completions to DIR/completions)");
    };
    let dir = PathBuf::from(dir);
    let (man, completions) = (dir.join("man"), dir.join("completions"));
    for path in [&man, &completions] {
        fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
    }
    for command in [
        cli::monitor_command("pfprof"),
        cli::work_command("pfprof-work"),
    ] {
        // One page for the command and one for each subcommand (pfprof-run.1).
        clap_mangen::generate_to(command.clone(), &man)
            .with_context(|| format!("writing the man pages to {}", man.display()))?;
        let name = command.get_name().to_owned();
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            clap_complete::generate_to(shell, &mut command.clone(), &name, &completions)
                .with_context(|| {
                    format!("writing {shell} completions to {}", completions.display())
                })?;
        }
    }
    Ok(())
}
