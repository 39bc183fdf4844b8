package client

// ProviderCounter reads one of c's device counters (0 when the provider
// keeps none): benchmarks report the provider's syscalls per call.
func ProviderCounter(c *Client, name string) uint64 { return c.providerCounter(name) }
