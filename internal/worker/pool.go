package worker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/internal/ahcache"
	"github.com/seqd/seqd/verbs"
)

// Pool is what every CPU mode's server holds besides its sessions: the
// protection domain, the address handles of its clients, and its workers,
// each running on a goroutine of its own. Embed it in the server.
type Pool[W Worker] struct {
	PD  verbs.PD
	AHs *ahcache.Cache // one handle per client address, reaped after the last client left
	// Workers, and the response QPs of all of them (AnswerQPs: a client
	// drops answers from any other sender).
	Workers   []W
	AnswerQPs []handshake.Endpoint
	wg        sync.WaitGroup
	stopOnce  sync.Once
	closed    bool // under the mode's admission lock (CloseOnce)
}

// Start allocates the protection domain and the address handle cache on
// dev, makes n workers with create (Create) and runs them (Run). On an
// error the caller closes the pool (Close): what was made is released.
func (p *Pool[W]) Start(dev verbs.Device, n int, create func(id int) (W, error)) error {
	var err error
	if p.PD, err = dev.AllocPD(); err != nil {
		return fmt.Errorf("worker pool: protection domain: %w", err)
	}
	p.AHs = ahcache.New(p.PD, 0)
	return p.StartWorkers(n, create)
}

// StartWorkers makes n workers with create (Create) and runs them (Run),
// for a mode that keeps no protection domain or address handles of the
// pool's (each session has its own). On an error the caller closes the
// pool (Close).
func (p *Pool[W]) StartWorkers(n int, create func(id int) (W, error)) error {
	var err error
	if p.Workers, p.AnswerQPs, err = Create(n, create); err != nil {
		return err
	}
	Run(&p.wg, p.Workers)
	return nil
}

// Stop drains the workers, once: it sets stopped while holding mu (the
// lock admission checks stopped under, so nothing is admitted after),
// calls wake (if any) so that a worker blocked waiting sees it, waits
// until every worker's Run returned (each finishes the batch in hand),
// then moves each worker's QPs to the error state (toErr, if any), so
// that late requests get no answer. Later calls do nothing; it reports whether this
// call stopped the pool.
func (p *Pool[W]) Stop(mu *sync.Mutex, stopped *atomic.Bool, wake func(), toErr func(W)) (first bool) {
	p.stopOnce.Do(func() {
		first = true
		mu.Lock()
		stopped.Store(true)
		mu.Unlock()
		if wake != nil {
			wake()
		}
		p.Wait()
		if toErr == nil {
			return
		}
		for _, w := range p.Workers {
			toErr(w)
		}
	})
	return first
}

// CloseOnce releases the pool once, holding mu (the mode's admission
// lock): release (if any) first frees what the mode keeps besides the
// pool (its sessions), then Close. Call it after Stop. Later calls do
// nothing.
func (p *Pool[W]) CloseOnce(mu *sync.Mutex, release func()) {
	mu.Lock()
	defer mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	if release != nil {
		release()
	}
	p.Close()
}

// Wait waits until every worker's Run returned.
func (p *Pool[W]) Wait() { p.wg.Wait() }

// Close closes the workers (which are no longer running), the address
// handles and the protection domain.
func (p *Pool[W]) Close() {
	for _, w := range p.Workers {
		w.Close()
	}
	if p.AHs != nil {
		p.AHs.Close()
	}
	if p.PD != nil {
		p.PD.Close()
	}
}

// AddressHandles is the number of open address handles, holding mu (the
// mode's admission lock): those of the connected clients' addresses and
// of addresses left within the grace period (ahcache.Grace).
func (p *Pool[W]) AddressHandles(mu *sync.Mutex) int {
	mu.Lock()
	defer mu.Unlock()
	p.AHs.Reap(time.Now())
	return p.AHs.Len()
}
