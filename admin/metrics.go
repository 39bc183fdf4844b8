package admin

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/seqd/seqd/admin/adminpb"
)

// adminMethods are the Admin service's methods, in label order.
var adminMethods = [...]struct {
	full, label string
}{
	{adminpb.Admin_Connect_FullMethodName, "Connect"},
	{adminpb.Admin_Disconnect_FullMethodName, "Disconnect"},
	{adminpb.Admin_Status_FullMethodName, "Status"},
}

// numCodes is the number of gRPC status codes, OK through Unauthenticated.
const numCodes = int(codes.Unauthenticated) + 1

// Metrics are the admin plane's Prometheus metrics. Create them with
// NewMetrics and hand them to the server in Config.Metrics.
type Metrics struct {
	// requests holds every {method, code} child, resolved once so that
	// counting never calls WithLabelValues.
	requests [len(adminMethods)][numCodes]prometheus.Counter
	// refused counts Connects refused by an admission quota, by reason
	// (refusalReasons).
	refused [len(refusalReasons)]prometheus.Counter
	// advanceRefused counts Advances refused by the budget, by kind
	// (refusedRate, refusedBudget).
	advanceRefused [len(refusedLabels)]prometheus.Counter
}

// NewMetrics registers the admin plane's metrics on reg:
//
//	seqd_admin_requests_total{method,code}  Admin requests answered
//	seqd_admin_sessions                     live data-path sessions
//	seqd_admin_admission_refused_total{reason}  Connects refused by a quota
//	seqd_admin_advance_refused_total{type}  Advances refused: rate, budget
//
// The sessions gauge is read from sessions at scrape time (see
// BackendSessions); it is not registered when sessions is nil. Requests that
// gRPC refuses before they reach the Admin service, such as oversized
// messages, are not counted.
func NewMetrics(reg prometheus.Registerer, sessions func() float64) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("admin: metrics: nil registerer")
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "seqd",
		Subsystem: "admin",
		Name:      "requests_total",
		Help:      "Admin gRPC requests answered, by method and status code.",
	}, []string{"method", "code"})
	if err := reg.Register(vec); err != nil {
		return nil, fmt.Errorf("admin: metrics: register requests_total: %w", err)
	}
	advRefused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "seqd",
		Subsystem: "admin",
		Name:      "advance_refused_total",
		Help:      "Advance calls refused by the Advance limits, by type: rate (over -advance-rate) or budget (over -advance-budget within -advance-budget-window).",
	}, []string{"type"})
	if err := reg.Register(advRefused); err != nil {
		return nil, fmt.Errorf("admin: metrics: register advance_refused_total: %w", err)
	}
	m := &Metrics{}
	for i, l := range refusedLabels {
		m.advanceRefused[i] = advRefused.WithLabelValues(l)
	}
	for i, meth := range adminMethods {
		for c := range numCodes {
			m.requests[i][c] = vec.WithLabelValues(meth.label, codes.Code(c).String())
		}
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "seqd",
		Subsystem: "admin",
		Name:      "admission_refused_total",
		Help:      "Connects refused by an admission quota (peer_sessions, peer_rate, peer_recv, identity_sessions, identity_rate, identity_recv), answered in a stale epoch (stale_epoch), refused by admission control while -admin-max-connects were in hand (busy), or TLS handshakes that waited too long for a slot (handshakes).",
	}, []string{"reason"})
	if err := reg.Register(refused); err != nil {
		return nil, fmt.Errorf("admin: metrics: register admission_refused_total: %w", err)
	}
	for i, r := range refusalReasons {
		m.refused[i] = refused.WithLabelValues(r)
	}
	if sessions != nil {
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "seqd",
			Subsystem: "admin",
			Name:      "sessions",
			Help:      "Live data-path sessions admitted through the admin plane.",
		}, sessions)
		if err := reg.Register(g); err != nil {
			return nil, fmt.Errorf("admin: metrics: register sessions: %w", err)
		}
	}
	return m, nil
}

// observe counts one answered request. method is a full gRPC method name;
// methods outside the Admin service are not counted. A nil m counts nothing.
func (m *Metrics) observe(method string, code codes.Code) {
	if m == nil {
		return
	}
	if int(code) >= numCodes {
		code = codes.Unknown
	}
	for i := range adminMethods {
		if adminMethods[i].full == method {
			m.requests[i][code].Inc()
			return
		}
	}
}

// refuse counts one admission refusal of reason refusalReasons[i]. A nil
// m counts nothing.
func (m *Metrics) refuse(i int) {
	if m != nil {
		m.refused[i].Inc()
	}
}

// refusedAdvance counts an Advance refused for kind (refusedRate,
// refusedBudget). A nil m counts nothing.
func (m *Metrics) refusedAdvance(kind int) {
	if m != nil {
		m.advanceRefused[kind].Inc()
	}
}

// BackendSessions returns a sessions function for NewMetrics that asks b for
// its Status, bounded by timeout, and reports StatusResponse.sessions. It
// reports NaN when the backend does not answer.
func BackendSessions(b Backend, timeout time.Duration) func() float64 {
	return func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		st, err := b.Status(ctx)
		if err != nil {
			return math.NaN()
		}
		return float64(st.GetSessions())
	}
}
