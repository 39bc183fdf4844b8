//go:build !linux

package soft

// The userspace provider needs Linux's batch socket calls (recvmmsg,
// sendmmsg, UDP GSO and GRO).
