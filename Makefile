# make deb: the Debian packages pfprof and pfprof-dkms, built from this checkout into
# target/debian/ ($CARGO_TARGET_DIR/debian), ready for `sudo apt install ./...deb`
# (README.md, "Install"). Needs debhelper, dh-dkms, dpkg-dev and python3 (apt), and a Rust
# toolchain of 1.80 or newer on PATH (rustup).
deb:
	dpkg-checkbuilddeps
	debian/rules clean
	debian/rules binary

.PHONY: deb
