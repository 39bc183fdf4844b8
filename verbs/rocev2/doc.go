// Package rocev2 encodes and decodes RoCEv2 packets: the InfiniBand base
// transport header (BTH) and the extension headers its opcode calls for
// (DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt), the payload with its
// pad, and the invariant CRC (ICRC) over the IPv4 and UDP headers.
//
// It is pure: no sockets, no allocation in Decode, Encode or ICRC. The
// layouts follow the IBTA RoCEv2 annex as Linux's rxe driver implements it
// (rxe_hdr.h, rxe_opcode.c, rxe_icrc.c); tests check them against packets
// built by an independent implementation (scapy).
package rocev2
