//go:build !linux

package echo

import "fmt"

// RawPair needs Linux (UDP GSO and GRO).
func RawPair() (cli, srv Side, err error) {
	return nil, nil, fmt.Errorf("%w: raw UDP GSO/GRO echo needs Linux", ErrEcho)
}
