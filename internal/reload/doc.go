// Package reload re-reads secrets from their files while a process runs:
// seqd's admin tokens and TLS key pair, seqd-pd's token and client
// certificate. A Watcher reloads every Source on a signal (SIGHUP) and
// each Source whose files changed (polled by their size, times and
// inode, so an atomic rename, a Kubernetes secret update and an edit in
// place are all seen). A reload that fails keeps the Source's old
// secrets: it is logged once and counted, and never crashes the process.
package reload
