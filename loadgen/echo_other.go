//go:build !linux

package loadgen

import "fmt"

func newRawEchoPair() (echoSide, echoSide, error) {
	return nil, nil, fmt.Errorf("%w: raw UDP GSO/GRO echo needs Linux", ErrEcho)
}
