// Package xdpprobe measures what an AF_XDP receive path would give the
// soft provider (docs/kernel-bypass.md): an XDP program that steers
// RoCEv2 (UDP destination port 4791) to an AF_XDP socket and passes every
// other packet to the kernel, and a minimal AF_XDP socket (UMEM, fill,
// RX, TX and completion rings, need_wakeup, an echo from the UMEM) over
// golang.org/x/sys/unix.
//
// The program and the socket live in verbs/soft/internal/xsk, which the
// provider uses (xdp=); this package keeps only the measurements.
//
// It is a measuring tool, not a data path: nothing in seqd or the client
// imports it. Its tests need root and run in two network namespaces
// joined by a veth pair; they skip and say why elsewhere. The receive
// and echo comparison runs only when SEQD_XDPBENCH is set (make
// bench-xdp).
package xdpprobe
