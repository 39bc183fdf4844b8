package client

// The default provider: a program that imports only this package can
// Dial without WithDevice. On systems other than Linux it is linked but
// fails at Dial with verbs.ErrNotSupported.
import _ "github.com/seqd/seqd/verbs/soft"
