package verbs

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Options are provider-specific settings, as key=value pairs (for example
// "queues=4" or "gid_index=3"). Each provider documents its keys and
// refuses keys it does not know.
type Options map[string]string

// ParseOptions parses "k=v,k=v".
func ParseOptions(s string) (Options, error) {
	o := Options{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: provider option %q is not key=value", ErrInvalidArgument, kv)
		}
		o[k] = v
	}
	return o, nil
}

// OpenFunc opens a device of a provider.
type OpenFunc func(device string, opts Options) (Device, error)

var (
	providersMu sync.RWMutex
	providers   = map[string]OpenFunc{}
)

// Register makes a provider available to Open. Providers call it from
// init; registering a name twice panics, as that is a programming error.
func Register(name string, open OpenFunc) {
	providersMu.Lock()
	defer providersMu.Unlock()
	if _, dup := providers[name]; dup {
		panic("verbs: provider registered twice: " + name)
	}
	providers[name] = open
}

// Providers lists the registered providers.
func Providers() []string {
	providersMu.RLock()
	defer providersMu.RUnlock()
	names := make([]string, 0, len(providers))
	for n := range providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open opens device of the named provider.
func Open(provider, device string, opts Options) (Device, error) {
	providersMu.RLock()
	open, ok := providers[provider]
	providersMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (have %s)", ErrNoProvider, provider, strings.Join(Providers(), ", "))
	}
	return open(device, opts)
}
