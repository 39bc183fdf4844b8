// Package xdp links AF_XDP receive into the soft provider: the XDP
// program that steers the provider's RoCEv2 packets to its AF_XDP
// sockets, built with cilium/ebpf's asm package (no clang). A binary
// that should accept -provider-opts xdp=DEV imports it for its side
// effect, as seqd does:
//
//	import _ "github.com/seqd/seqd/verbs/soft/xdp"
//
// Without it, xdp= fails with an error that names this package. The
// client does not import it, so that a service calling GetTimestamp does
// not carry an eBPF loader.
package xdp
