//! What a terminal is like: its width, which a line drawn on it must stay within (a line
//! as wide as the terminal wraps, and each redraw then leaves a row behind).

use std::io;
use std::os::fd::AsRawFd;

// TIOCGWINSZ through nix's ioctl macro: std has no way to ask a terminal its size, and
// the crates that wrap it (terminal_size, rustix) are not among the project's.
nix::ioctl_read_bad!(window_size, libc::TIOCGWINSZ, libc::winsize);

/// The columns of standard error's terminal, asked anew each time (a window resized
/// meanwhile is seen at the next draw); `None` when it is no terminal or does not say.
pub fn stderr_columns() -> Option<usize> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into `size`, which lives across the call; a
    // descriptor that is no terminal fails with ENOTTY and writes nothing.
    unsafe { window_size(io::stderr().as_raw_fd(), &mut size) }.ok()?;
    (size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// The widest a line drawn on standard error's terminal may be: one column short of it,
/// or of 80 when it does not say, and never under 20.
pub fn stderr_line_width() -> usize {
    stderr_columns().unwrap_or(80).saturating_sub(1).max(20)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_descriptor_that_is_no_terminal_has_no_width_and_lines_take_79() {
        // cargo test's standard error is a pipe or a file here, or a terminal: either
        // way the width is one short of what it says, within bounds.
        let width = super::stderr_line_width();
        match super::stderr_columns() {
            None => assert_eq!(width, 79),
            Some(cols) => assert_eq!(width, cols.saturating_sub(1).max(20)),
        }
    }
}
