//go:build !linux

package headeronly

import "fmt"

func pin(core int) error {
	return fmt.Errorf("headeronly: pinning to core %d is only supported on linux", core)
}
