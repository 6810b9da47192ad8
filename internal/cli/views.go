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
	Epoch       int64     `json:"epoch"`
	Generation  int64     `json:"generation"`
	CreatedAt   time.Time `json:"created_at"`
	LiveNodes   int       `json:"live_nodes"`
	SumShare    int       `json:"sum_share"`
	SumInflight int       `json:"sum_inflight"`
	// Utilization is SumInflight / LGlobal, nil when LGlobal is 0.
	Utilization *float64 `json:"utilization"`
	// HeldRows and HeldReserve cover rows that are no members but still
	// hold capacity (expired, departed or evicted instances).
	HeldRows    int `json:"held_rows"`
	HeldReserve int `json:"held_reserve"`
	// LearningUntil is set while the key is in learning mode.
	LearningUntil *time.Time `json:"learning_until"`
	Drains        []string   `json:"drains"`
}

func newKeyView(k coord.KeyInfo) keyView {
	v := keyView{
		Key:         k.Key,
		LGlobal:     k.LGlobal,
		MinLimit:    k.MinLimit,
		MaxLimit:    k.MaxLimit,
		Aggregate:   string(k.Aggregate),
		Epoch:       k.Epoch,
		Generation:  k.Generation,
		CreatedAt:   k.CreatedAt.UTC(),
		LiveNodes:   k.LiveNodes,
		SumShare:    k.SumShare,
		SumInflight: k.SumInflight,
		HeldRows:    k.HeldRows,
		HeldReserve: k.HeldReserve,
		Drains:      k.Drains,
	}
	if v.Drains == nil {
		v.Drains = []string{}
	}
	if k.Learning {
		until := k.LearningUntil.UTC()
		v.LearningUntil = &until
	}
	if k.LGlobal > 0 {
		u := float64(k.SumInflight) / float64(k.LGlobal)
		v.Utilization = &u
	}
	return v
}

var keyColumns = []string{"KEY", "L_GLOBAL", "MIN", "MAX", "NODES", "SHARE", "INFLIGHT", "UTIL", "HELD", "MODE"}

func (v keyView) cells() []string {
	mode := "normal"
	if v.LearningUntil != nil {
		mode = "learning"
	}
	return []string{cell(v.Key), strconv.Itoa(v.LGlobal), optInt(v.MinLimit), optInt(v.MaxLimit),
		strconv.Itoa(v.LiveNodes), strconv.Itoa(v.SumShare), strconv.Itoa(v.SumInflight), percent(v.Utilization),
		strconv.Itoa(v.HeldReserve), mode}
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
	Reserve          int               `json:"reserve"`
	Epoch            int64             `json:"epoch"`
	GrantedGen       int64             `json:"granted_gen"`
	AppliedGen       int64             `json:"applied_gen"`
	UnackedHigh      int               `json:"unacked_high"`
	LeaseRemainingMS int64             `json:"lease_remaining_ms"`
	HoldRemainingMS  int64             `json:"hold_remaining_ms"`
	HeartbeatAgeMS   int64             `json:"heartbeat_age_ms"`
	LeaseExpiresAt   time.Time         `json:"lease_expires_at"`
	HoldUntil        time.Time         `json:"hold_until"`
	HeartbeatAt      time.Time         `json:"heartbeat_at"`
	JoinedAt         time.Time         `json:"joined_at"`
	Status           string            `json:"status"`
	Draining         bool              `json:"draining"`
	Evicted          bool              `json:"evicted"`
	Departed         bool              `json:"departed"`
	Fenced           bool              `json:"fenced"`
	Labels           map[string]string `json:"labels"`

	leaseRemaining, holdRemaining, heartbeatAge time.Duration
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
		Reserve:          n.Reserve,
		Epoch:            n.Epoch,
		GrantedGen:       n.GrantedGen,
		AppliedGen:       n.AppliedGen,
		UnackedHigh:      n.UnackedHigh,
		LeaseRemainingMS: n.LeaseRemaining.Milliseconds(),
		HoldRemainingMS:  n.HoldRemaining.Milliseconds(),
		HeartbeatAgeMS:   n.HeartbeatAge.Milliseconds(),
		LeaseExpiresAt:   n.LeaseExpiresAt.UTC(),
		HoldUntil:        n.HoldUntil.UTC(),
		HeartbeatAt:      n.HeartbeatAt.UTC(),
		JoinedAt:         n.JoinedAt.UTC(),
		Status:           string(n.Status),
		Draining:         n.Draining,
		Evicted:          n.Evicted,
		Departed:         n.Departed,
		Fenced:           n.LeaseRemaining <= 0,
		Labels:           labels,
		leaseRemaining:   n.LeaseRemaining,
		holdRemaining:    n.HoldRemaining,
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

var nodeColumns = []string{"NODE", "INSTANCE", "L_LOCAL", "SHARE", "INFLIGHT", "DEMAND", "RESERVE", "GEN", "LEASE",
	"HOLD", "HEARTBEAT", "STATUS", "FENCED", "LABELS"}

func (v nodeView) cells() []string {
	lease := "expired"
	if !v.Fenced {
		lease = shortDuration(v.leaseRemaining)
	}
	hold := "-"
	if v.holdRemaining > 0 {
		hold = shortDuration(v.holdRemaining)
	}
	instance := v.Instance
	if r := []rune(instance); len(r) > 8 {
		instance = string(r[:8])
	}
	fenced := "no"
	if v.Fenced {
		fenced = "yes"
	}
	return []string{
		cell(v.NodeID), cell(instance), strconv.Itoa(v.LLocal), strconv.Itoa(v.Share), strconv.Itoa(v.Inflight),
		strconv.Itoa(v.Demand), strconv.Itoa(v.Reserve),
		strconv.FormatInt(v.GrantedGen, 10) + "/" + strconv.FormatInt(v.AppliedGen, 10),
		lease, hold, shortDuration(v.heartbeatAge) + " ago", v.Status, fenced, cell(labelsString(v.Labels)),
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
