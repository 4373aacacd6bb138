//! What a terminal is like: its width, which a line drawn on it must stay within (a line
//! as wide as the terminal wraps, and each redraw then leaves a row behind), and whether
//! a full-screen program has it.

use std::io;
use std::os::fd::AsRawFd;

// TIOCGWINSZ through nix's ioctl macro: std has no way to ask a terminal its size, and
// the crates that wrap it (terminal_size, rustix) are not among the project's.
nix::ioctl_read_bad!(window_size, libc::TIOCGWINSZ, libc::winsize);

/// The columns of standard error's terminal, asked anew each time (a window resized
/// meanwhile is seen at the next draw); `None` when it is no terminal or does not say.
pub fn stderr_columns() -> Option<usize> {
    columns(&io::stderr())
}

/// The columns of the terminal `fd` is, if it is one that says.
fn columns(fd: &impl AsRawFd) -> Option<usize> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into `size`, which lives across the call; a
    // descriptor that is no terminal fails with ENOTTY and writes nothing.
    unsafe { window_size(fd.as_raw_fd(), &mut size) }.ok()?;
    (size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// The widest a line drawn on standard error's terminal may be: one column short of it,
/// or of 80 when it does not say, and never under 20.
pub fn stderr_line_width() -> usize {
    stderr_columns().unwrap_or(80).saturating_sub(1).max(20)
}

/// Whether standard error's terminal reads input a line at a time, as a shell leaves it;
/// not while a full-screen program (less, vim, top) runs on it, which turns canonical
/// input off.
pub fn stderr_is_line_by_line() -> bool {
    nix::sys::termios::tcgetattr(io::stderr()).is_ok_and(|t| {
        t.local_flags
            .contains(nix::sys::termios::LocalFlags::ICANON)
    })
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use nix::pty::{openpty, Winsize};

    #[test]
    fn a_terminal_says_its_width_and_a_pipe_has_none() {
        let size = Winsize {
            ws_row: 24,
            ws_col: 37,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = openpty(Some(&size), None).unwrap();
        assert_eq!(super::columns(&File::from(pty.slave)), Some(37));
        let (read, _write) = nix::unistd::pipe().unwrap();
        assert_eq!(super::columns(&File::from(read)), None);
    }
}
