package ibv

import "testing"

func TestAsyncState(t *testing.T) {
	var a asyncState
	for _, k := range []asyncKind{asyncCQErr, asyncPortErr, asyncQPFatal, asyncPortErr, asyncKind(200)} {
		a.record(k)
	}
	got := map[string]uint64{}
	a.visit(func(n string, v uint64) { got[n] = v })
	want := map[string]uint64{"async_cq_err": 1, "async_port_err": 2, "async_qp_fatal": 1, "async_other": 1,
		"port_down": 1, "device_fatal": 0, "async_port_active": 0}
	for n, v := range want {
		if got[n] != v {
			t.Errorf("%s = %d, want %d", n, got[n], v)
		}
	}
	a.record(asyncPortActive)
	a.record(asyncDeviceFatal)
	a.visit(func(n string, v uint64) { got[n] = v })
	if got["port_down"] != 0 || got["device_fatal"] != 1 {
		t.Errorf("after PORT_ACTIVE and DEVICE_FATAL: port_down %d device_fatal %d", got["port_down"], got["device_fatal"])
	}
}
