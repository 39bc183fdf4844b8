// Package e2e holds seqd's end-to-end tests and HeldLoad, the load that
// they and the HA tests drive across restarts, mode switches and
// failovers. Every history is checked by package loadgen/verify.
package e2e
