//go:build !linux

package herd

import "errors"

func pin(core int) error { return errors.New("herd: core pinning needs linux") }
