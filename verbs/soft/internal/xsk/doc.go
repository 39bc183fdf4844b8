// Package xsk is the soft provider's AF_XDP plumbing: an XDP program,
// built with cilium/ebpf's asm package (no clang), that steers the
// provider's RoCEv2 packets to AF_XDP sockets and passes every other
// packet to the kernel, and an AF_XDP socket over golang.org/x/sys/unix
// (UMEM, the fill, RX, TX and completion rings, need_wakeup, zero-copy
// or copy mode). verbs/soft's xdp= option uses it for receive
// (docs/kernel-bypass.md); verbs/soft/internal/xdpprobe measures it.
//
// Everything here needs root, or CAP_NET_ADMIN and CAP_BPF (and
// CAP_NET_RAW for the socket).
package xsk
