// Package glibctest proves that the binaries "make build" produces start on
// old glibc bases: it builds them with scripts/build.sh against the cached
// Debian bullseye root (scripts/bullseye-rootfs.sh), checks that worker-agent
// asks for no glibc symbol version newer than GLIBC_2.28 (from the ELF
// version references, and with objdump -T when binutils is installed) and
// that the launcher is static, then runs both inside the bullseye root
// (chroot), worker-agent as the images hold it (bin/worker-agent, a link to
// the launcher, which checks the image and runs libexec/worker-agent):
// --help, and a real SSH session from the host, on loopback, to
// worker-agent serving in the root as an arbitrary UID in group 0, with a
// second session from the launcher's own ssh client inside the root.
//
// It needs root (chroot) and the bullseye root; without the root it skips
// with one line, unless PODMPI_GLIBC_TEST=1 (CI sets it), which makes a
// missing root a failure.
package glibctest
