package cli

import (
	"io"
	"strconv"
	"time"

	"github.com/fleetlimit/fleetlimit/coord"
)

// keyView is one key as keys prints it. Its JSON form is a stable interface
// (see the package doc): add fields, never rename or remove them.
type keyView struct {
	Key         string    `json:"key"`
	LGlobal     int       `json:"l_global"`
	MinLimit    *int      `json:"min_limit"`
	MaxLimit    *int      `json:"max_limit"`
	Aggregate   string    `json:"aggregate"`
	Generation  int64     `json:"generation"`
	CreatedAt   time.Time `json:"created_at"`
	LiveNodes   int       `json:"live_nodes"`
	SumShare    int       `json:"sum_share"`
	SumInflight int       `json:"sum_inflight"`
	// Utilization is SumInflight / LGlobal, nil when LGlobal is 0.
	Utilization *float64 `json:"utilization"`
}

func newKeyView(k coord.KeyInfo) keyView {
	v := keyView{
		Key:         k.Key,
		LGlobal:     k.LGlobal,
		MinLimit:    k.MinLimit,
		MaxLimit:    k.MaxLimit,
		Aggregate:   string(k.Aggregate),
		Generation:  k.Generation,
		CreatedAt:   k.CreatedAt.UTC(),
		LiveNodes:   k.LiveNodes,
		SumShare:    k.SumShare,
		SumInflight: k.SumInflight,
	}
	if k.LGlobal > 0 {
		u := float64(k.SumInflight) / float64(k.LGlobal)
		v.Utilization = &u
	}
	return v
}

var keyColumns = []string{"KEY", "L_GLOBAL", "MIN", "MAX", "NODES", "SHARE", "INFLIGHT", "UTIL"}

func (v keyView) cells() []string {
	return []string{cell(v.Key), strconv.Itoa(v.LGlobal), optInt(v.MinLimit), optInt(v.MaxLimit),
		strconv.Itoa(v.LiveNodes), strconv.Itoa(v.SumShare), strconv.Itoa(v.SumInflight), percent(v.Utilization)}
}

// writeKeysTable writes keys as a table.
func writeKeysTable(w io.Writer, keys []keyView) error {
	t := newTable(w, keyColumns...)
	for _, k := range keys {
		t.row(k.cells()...)
	}
	return t.flush()
}

// nodeView is one node row as nodes prints it. Its JSON form is a stable
// interface (see the package doc).
type nodeView struct {
	Key              string            `json:"key"`
	NodeID           string            `json:"node_id"`
	Instance         string            `json:"instance"`
	Seq              int64             `json:"seq"`
	LLocal           int               `json:"l_local"`
	Share            int               `json:"share"`
	Inflight         int               `json:"inflight"`
	Demand           int               `json:"demand"`
	GrantedGen       int64             `json:"granted_gen"`
	AppliedGen       int64             `json:"applied_gen"`
	UnackedHigh      int               `json:"unacked_high"`
	LeaseRemainingMS int64             `json:"lease_remaining_ms"`
	HeartbeatAgeMS   int64             `json:"heartbeat_age_ms"`
	LeaseExpiresAt   time.Time         `json:"lease_expires_at"`
	HeartbeatAt      time.Time         `json:"heartbeat_at"`
	JoinedAt         time.Time         `json:"joined_at"`
	Status           string            `json:"status"`
	Draining         bool              `json:"draining"`
	Evicted          bool              `json:"evicted"`
	Fenced           bool              `json:"fenced"`
	Labels           map[string]string `json:"labels"`

	leaseRemaining, heartbeatAge time.Duration
}

func newNodeView(n coord.NodeInfo) nodeView {
	labels := n.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	return nodeView{
		Key:              n.Key,
		NodeID:           n.NodeID,
		Instance:         n.Instance,
		Seq:              n.Seq,
		LLocal:           n.LLocal,
		Share:            n.Share,
		Inflight:         n.Inflight,
		Demand:           n.Demand,
		GrantedGen:       n.GrantedGen,
		AppliedGen:       n.AppliedGen,
		UnackedHigh:      n.UnackedHigh,
		LeaseRemainingMS: n.LeaseRemaining.Milliseconds(),
		HeartbeatAgeMS:   n.HeartbeatAge.Milliseconds(),
		LeaseExpiresAt:   n.LeaseExpiresAt.UTC(),
		HeartbeatAt:      n.HeartbeatAt.UTC(),
		JoinedAt:         n.JoinedAt.UTC(),
		Status:           string(n.Status()),
		Draining:         n.Draining,
		Evicted:          n.Evicted,
		Fenced:           n.LeaseRemaining <= 0,
		Labels:           labels,
		leaseRemaining:   n.LeaseRemaining,
		heartbeatAge:     n.HeartbeatAge,
	}
}

func newNodeViews(nodes []coord.NodeInfo) []nodeView {
	out := make([]nodeView, len(nodes))
	for i, n := range nodes {
		out[i] = newNodeView(n)
	}
	return out
}

var nodeColumns = []string{"NODE", "L_LOCAL", "SHARE", "INFLIGHT", "DEMAND", "GEN", "LEASE", "HEARTBEAT", "STATUS", "FENCED", "LABELS"}

func (v nodeView) cells() []string {
	lease := "expired"
	if !v.Fenced {
		lease = shortDuration(v.leaseRemaining)
	}
	fenced := "no"
	if v.Fenced {
		fenced = "yes"
	}
	return []string{
		cell(v.NodeID), strconv.Itoa(v.LLocal), strconv.Itoa(v.Share), strconv.Itoa(v.Inflight),
		strconv.Itoa(v.Demand), strconv.FormatInt(v.GrantedGen, 10) + "/" + strconv.FormatInt(v.AppliedGen, 10),
		lease, shortDuration(v.heartbeatAge) + " ago", v.Status, fenced, cell(labelsString(v.Labels)),
	}
}

// writeNodesTable writes nodes as a table.
func writeNodesTable(w io.Writer, nodes []nodeView) error {
	t := newTable(w, nodeColumns...)
	for _, n := range nodes {
		t.row(n.cells()...)
	}
	return t.flush()
}

// limitsView is what limits get prints. Its JSON form is a stable interface.
type limitsView struct {
	Key       string `json:"key"`
	MinLimit  *int   `json:"min_limit"`
	MaxLimit  *int   `json:"max_limit"`
	LGlobal   int    `json:"l_global"`
	Aggregate string `json:"aggregate"`
}

func newLimitsView(k coord.KeyInfo) limitsView {
	return limitsView{Key: k.Key, MinLimit: k.MinLimit, MaxLimit: k.MaxLimit, LGlobal: k.LGlobal, Aggregate: string(k.Aggregate)}
}

func writeLimitsTable(w io.Writer, v limitsView) error {
	t := newTable(w, "KEY", "MIN", "MAX", "L_GLOBAL", "AGGREGATE")
	t.row(cell(v.Key), optInt(v.MinLimit), optInt(v.MaxLimit), strconv.Itoa(v.LGlobal), v.Aggregate)
	return t.flush()
}
