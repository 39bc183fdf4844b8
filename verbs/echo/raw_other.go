//go:build !linux

package echo

import "fmt"

// RawPair needs Linux (UDP GSO and GRO).
func RawPair() (cli, srv Side, err error) {
	return nil, nil, fmt.Errorf("%w: raw UDP GSO/GRO echo needs Linux", ErrEcho)
}

// RawEnd is one end of the raw UDP echo; it needs Linux.
type RawEnd struct{ Side }

// OpenRaw needs Linux (UDP GSO and GRO).
func OpenRaw() (RawEnd, error) {
	return RawEnd{}, fmt.Errorf("%w: raw UDP GSO/GRO echo needs Linux", ErrEcho)
}

// Port is 0: there is no end.
func (RawEnd) Port() uint16 { return 0 }

// Connect does nothing: there is no end.
func (RawEnd) Connect(uint16) {}
