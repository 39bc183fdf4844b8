package oracle

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns the oracle's metrics, named seqd_oracle_*, with a
// constant "format" label. Counters and gauges read the oracle's atomics at
// scrape time, so the hot path does no metric work at all; the persist
// histogram is observed by the persister.
//
// Values are exported as float64: hybrid values (about 2^60) lose their low
// bits there, so the gauges are for trends and alerts, not for reading exact
// timestamps (use Current and Mark for that).
func (o *Oracle) Collectors() []prometheus.Collector {
	labels := prometheus.Labels{"format": o.Format().String()}
	counter := func(name, help string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "seqd_oracle_" + name, Help: help, ConstLabels: labels,
		}, func() float64 { return float64(f()) })
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "seqd_oracle_" + name, Help: help, ConstLabels: labels,
		}, f)
	}
	return []prometheus.Collector{
		o.persistHist,
		counter("claims_total", "Successful batched claims.", func() uint64 { return o.Stats().Claims }),
		counter("values_total", "Values handed out.", func() uint64 { return o.Stats().Values }),
		counter("persist_stalls_total", "Claims that returned ErrBehind because they would cross the persisted mark.", o.c.Stalls),
		counter("persist_errors_total", "Failed saves of the high-water mark.", o.persistErrors.Load),
		counter("persists_total", "Successful saves of the high-water mark.", o.persists.Load),
		counter("clock_steps_back_total", "Times the wall clock was seen stepping backward.", o.c.ClockStepsBack),
		gauge("current_value", "Last value handed out (float64: low bits lost for hybrid).", func() float64 { return float64(o.c.Current()) }),
		gauge("persisted_mark", "Persisted high-water mark (float64: low bits lost for hybrid).", func() float64 { return float64(o.c.Mark()) }),
		gauge("headroom_values", "Values left below the persisted mark.", func() float64 {
			cur, m := o.c.Current(), o.c.Mark()
			if cur >= m {
				return 0
			}
			return float64(m - cur)
		}),
	}
}

// Register registers the oracle's Collectors with r.
func (o *Oracle) Register(r prometheus.Registerer) error {
	for _, c := range o.Collectors() {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
