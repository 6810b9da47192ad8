package cli

import (
	"io"
	"slices"
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
	// Unchecked is true when the key's next heartbeat puts it in learning
	// mode: the database may have lost state since its last check (see
	// coord.KeyInfo.Unchecked).
	Unchecked bool     `json:"unchecked"`
	Drains    []string `json:"drains"`
	// RPM and TPM are the key's request and token rates per minute as the
	// newest heartbeat computed them, nil for none; RPMLimit and TPMLimit
	// the operator's, nil for none; SumRPMShare and SumTPMShare the
	// members' rate shares added up, SumRPMUsed and SumTPMUsed what they
	// sent in the minute before their last heartbeats.
	RPM         *int64 `json:"rpm"`
	TPM         *int64 `json:"tpm"`
	RPMLimit    *int64 `json:"rpm_limit"`
	TPMLimit    *int64 `json:"tpm_limit"`
	SumRPMShare int64  `json:"sum_rpm_share"`
	SumTPMShare int64  `json:"sum_tpm_share"`
	SumRPMUsed  int64  `json:"sum_rpm_used"`
	SumTPMUsed  int64  `json:"sum_tpm_used"`
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
		RPM:         optRate(k.Rate.Requests),
		TPM:         optRate(k.Rate.Tokens),
		RPMLimit:    optRate(k.RateLimit.Requests),
		TPMLimit:    optRate(k.RateLimit.Tokens),
		SumRPMShare: k.SumRateShare.Requests,
		SumTPMShare: k.SumRateShare.Tokens,
		SumRPMUsed:  k.SumRateUsed.Requests,
		SumTPMUsed:  k.SumRateUsed.Tokens,
	}
	if v.Drains == nil {
		v.Drains = []string{}
	}
	if k.Learning {
		until := k.LearningUntil.UTC()
		v.LearningUntil = &until
	}
	v.Unchecked = k.Unchecked
	if k.LGlobal > 0 {
		u := float64(k.SumInflight) / float64(k.LGlobal)
		v.Utilization = &u
	}
	return v
}

var keyColumns = []string{"KEY", "L_GLOBAL", "MIN", "MAX", "NODES", "SHARE", "INFLIGHT", "UTIL", "HELD", "MODE"}

// keyRateColumns go before MODE when a key has a rate.
var keyRateColumns = []string{"RPM", "TPM", "RATE_SHARE", "RATE_USED"}

// rateDims reports on which dimensions (requests, tokens) the key has a
// rate: there a share of 0 paces a node to nothing; elsewhere it means no
// pacing.
func (v keyView) rateDims() [2]bool { return [2]bool{v.RPM != nil, v.TPM != nil} }

// hasRates reports whether the key has a rate of its own, an operator's
// rate or members with a rate share.
func (v keyView) hasRates() bool {
	return v.RPM != nil || v.TPM != nil || v.RPMLimit != nil || v.TPMLimit != nil ||
		v.SumRPMShare != 0 || v.SumTPMShare != 0
}

func (v keyView) cells(rates bool) []string {
	mode := "normal"
	switch {
	case v.LearningUntil != nil:
		mode = "learning"
	case v.Unchecked:
		mode = "unchecked"
	}
	out := []string{cell(v.Key), lGlobal(v.LGlobal), optInt(v.MinLimit), optInt(v.MaxLimit),
		strconv.Itoa(v.LiveNodes), strconv.Itoa(v.SumShare), strconv.Itoa(v.SumInflight), percent(v.Utilization),
		strconv.Itoa(v.HeldReserve)}
	if rates {
		out = append(out, rateWithLimit(v.RPM, v.RPMLimit), rateWithLimit(v.TPM, v.TPMLimit),
			sharePair(v.SumRPMShare, v.SumTPMShare, v.rateDims()), ratePair(v.SumRPMUsed, v.SumTPMUsed))
	}
	return append(out, mode)
}

// writeKeysTable writes keys as a table; the rate columns appear when a key
// has a rate.
func writeKeysTable(w io.Writer, keys []keyView) error {
	rates := false
	for _, k := range keys {
		rates = rates || k.hasRates()
	}
	columns := keyColumns
	if rates {
		columns = slices.Insert(slices.Clone(keyColumns), len(keyColumns)-1, keyRateColumns...)
	}
	t := newTable(w, columns...)
	for _, k := range keys {
		t.row(k.cells(rates)...)
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
	// The node's rates per minute, requests (rpm) and tokens (tpm): its
	// rate share (granted), what it sent in the minute before its last
	// heartbeat, its rate demand, its own estimate of the key's
	// rate (nil when it learned none), what the row holds back from the
	// others' rate shares now, and the largest rate share granted since
	// the node's last acknowledgement.
	RPMShare   int64  `json:"rpm_share"`
	TPMShare   int64  `json:"tpm_share"`
	RPMUsed    int64  `json:"rpm_used"`
	TPMUsed    int64  `json:"tpm_used"`
	RPMDemand  int64  `json:"rpm_demand"`
	TPMDemand  int64  `json:"tpm_demand"`
	RPMLocal   *int64 `json:"rpm_local"`
	TPMLocal   *int64 `json:"tpm_local"`
	RPMReserve int64  `json:"rpm_reserve"`
	TPMReserve int64  `json:"tpm_reserve"`
	RPMHigh    int64  `json:"rpm_high"`
	TPMHigh    int64  `json:"tpm_high"`

	// keyRates is the key's rateDims, for the rate share cells.
	keyRates [2]bool

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
		RPMShare:         n.RateShare.Requests,
		TPMShare:         n.RateShare.Tokens,
		RPMUsed:          n.RateUsed.Requests,
		TPMUsed:          n.RateUsed.Tokens,
		RPMDemand:        n.RateDemand.Requests,
		TPMDemand:        n.RateDemand.Tokens,
		RPMLocal:         optRate(n.RateLocal.Requests),
		TPMLocal:         optRate(n.RateLocal.Tokens),
		RPMReserve:       n.RateReserve.Requests,
		TPMReserve:       n.RateReserve.Tokens,
		RPMHigh:          n.RateHigh.Requests,
		TPMHigh:          n.RateHigh.Tokens,
		leaseRemaining:   n.LeaseRemaining,
		holdRemaining:    n.HoldRemaining,
		heartbeatAge:     n.HeartbeatAge,
	}
}

// newNodeViews describes the rows of key k.
func newNodeViews(k keyView, nodes []coord.NodeInfo) []nodeView {
	out := make([]nodeView, len(nodes))
	for i, n := range nodes {
		out[i] = newNodeView(n)
		out[i].keyRates = k.rateDims()
	}
	return out
}

var nodeColumns = []string{"NODE", "INSTANCE", "L_LOCAL", "SHARE", "INFLIGHT", "DEMAND", "RESERVE", "GEN", "LEASE",
	"HOLD", "HEARTBEAT", "STATUS", "FENCED", "LABELS"}

// nodeRateColumns go after RESERVE when a row has a rate: each is
// requests/tokens per minute.
var nodeRateColumns = []string{"RATE_SHARE", "RATE_USED", "RATE_DEMAND", "RATE_LOCAL"}

// hasRates reports whether the row has a rate share, a rate demand or a
// rate estimate.
func (v nodeView) hasRates() bool {
	return v.RPMShare != 0 || v.TPMShare != 0 || v.RPMDemand != 0 || v.TPMDemand != 0 ||
		v.RPMLocal != nil || v.TPMLocal != nil
}

func (v nodeView) cells(rates bool) []string {
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
	out := []string{
		cell(v.NodeID), cell(instance), strconv.Itoa(v.LLocal), strconv.Itoa(v.Share), strconv.Itoa(v.Inflight),
		strconv.Itoa(v.Demand), strconv.Itoa(v.Reserve),
	}
	if rates {
		out = append(out, sharePair(v.RPMShare, v.TPMShare, v.keyRates), ratePair(v.RPMUsed, v.TPMUsed),
			ratePair(v.RPMDemand, v.TPMDemand),
			ratePair(deref(v.RPMLocal), deref(v.TPMLocal)))
	}
	return append(out,
		strconv.FormatInt(v.GrantedGen, 10)+"/"+strconv.FormatInt(v.AppliedGen, 10),
		lease, hold, shortDuration(v.heartbeatAge)+" ago", v.Status, fenced, labelsString(v.Labels),
	)
}

// writeNodesTable writes nodes as a table; the rate columns appear when a
// row has a rate.
func writeNodesTable(w io.Writer, nodes []nodeView) error {
	rates := false
	for _, n := range nodes {
		rates = rates || n.hasRates()
	}
	columns := nodeColumns
	if rates {
		columns = slices.Insert(slices.Clone(nodeColumns), slices.Index(nodeColumns, "RESERVE")+1, nodeRateColumns...)
	}
	t := newTable(w, columns...)
	for _, n := range nodes {
		t.row(n.cells(rates)...)
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
	// RPMLimit and TPMLimit are the operator's rates per minute, RPM and
	// TPM the key's as the newest heartbeat computed them; nil for none.
	RPMLimit *int64 `json:"rpm_limit"`
	TPMLimit *int64 `json:"tpm_limit"`
	RPM      *int64 `json:"rpm"`
	TPM      *int64 `json:"tpm"`
}

func newLimitsView(k coord.KeyInfo) limitsView {
	return limitsView{Key: k.Key, MinLimit: k.MinLimit, MaxLimit: k.MaxLimit, LGlobal: k.LGlobal, Aggregate: string(k.Aggregate),
		RPMLimit: optRate(k.RateLimit.Requests), TPMLimit: optRate(k.RateLimit.Tokens),
		RPM: optRate(k.Rate.Requests), TPM: optRate(k.Rate.Tokens)}
}

func writeLimitsTable(w io.Writer, v limitsView) error {
	t := newTable(w, "KEY", "MIN", "MAX", "L_GLOBAL", "AGGREGATE", "RPM", "TPM")
	t.row(cell(v.Key), optInt(v.MinLimit), optInt(v.MaxLimit), lGlobal(v.LGlobal), v.Aggregate,
		rateWithLimit(v.RPM, v.RPMLimit), rateWithLimit(v.TPM, v.TPMLimit))
	return t.flush()
}

// optRate is a rate per minute with 0 (none) as nil.
func optRate(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}

func deref(v *int64) int64 {
	if v == nil {
		return 0
	}
	return *v
}

// rateWithLimit formats a key's rate and the operator's: "600", "540 (max
// 600)", "- (max 600)" before a heartbeat has computed the key's rate, "-"
// for none.
func rateWithLimit(rate, limit *int64) string {
	s := optInt64(rate)
	if limit != nil {
		s += " (max " + strconv.FormatInt(*limit, 10) + ")"
	}
	return s
}

// ratePair formats requests and tokens per minute as "600/90000", "600/-"
// ("-" is none), or "-" when both are 0.
func ratePair(requests, tokens int64) string {
	if requests == 0 && tokens == 0 {
		return "-"
	}
	return optInt64(optRate(requests)) + "/" + optInt64(optRate(tokens))
}

// sharePair formats rate shares as requests/tokens per minute: on a
// dimension where the key has a rate (dims) the number, 0 included (the
// node may send nothing); elsewhere "-" (no pacing). "-" alone when the key
// has no rate.
func sharePair(requests, tokens int64, dims [2]bool) string {
	if !dims[0] && !dims[1] && requests == 0 && tokens == 0 {
		return "-"
	}
	f := func(v int64, has bool) string {
		if !has && v == 0 {
			return "-"
		}
		return strconv.FormatInt(v, 10)
	}
	return f(requests, dims[0]) + "/" + f(tokens, dims[1])
}

// optInt64 formats an optional number: "-" for nil.
func optInt64(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}
