package main_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/fleettest"
)

// decodeJSON decodes s into a fresh value of type T, rejecting unknown
// fields, so that the JSON interface is checked field by field.
func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	dec := jsonDecoder(s)
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&v), "decoding %s", s)
	return v
}

type keyJSON struct {
	Key           string     `json:"key"`
	LGlobal       int        `json:"l_global"`
	MinLimit      *int       `json:"min_limit"`
	MaxLimit      *int       `json:"max_limit"`
	Aggregate     string     `json:"aggregate"`
	Epoch         int64      `json:"epoch"`
	Generation    int64      `json:"generation"`
	CreatedAt     time.Time  `json:"created_at"`
	LiveNodes     int        `json:"live_nodes"`
	SumShare      int        `json:"sum_share"`
	SumInflight   int        `json:"sum_inflight"`
	Utilization   *float64   `json:"utilization"`
	HeldRows      int        `json:"held_rows"`
	HeldReserve   int        `json:"held_reserve"`
	LearningUntil *time.Time `json:"learning_until"`
	Unchecked     bool       `json:"unchecked"`
	Drains        []string   `json:"drains"`
	RPM           *int64     `json:"rpm"`
	TPM           *int64     `json:"tpm"`
	RPMLimit      *int64     `json:"rpm_limit"`
	TPMLimit      *int64     `json:"tpm_limit"`
	SumRPMShare   int64      `json:"sum_rpm_share"`
	SumTPMShare   int64      `json:"sum_tpm_share"`
	SumRPMUsed    int64      `json:"sum_rpm_used"`
	SumTPMUsed    int64      `json:"sum_tpm_used"`
}

type nodeJSON struct {
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
	RPMShare         int64             `json:"rpm_share"`
	TPMShare         int64             `json:"tpm_share"`
	RPMUsed          int64             `json:"rpm_used"`
	TPMUsed          int64             `json:"tpm_used"`
	RPMDemand        int64             `json:"rpm_demand"`
	TPMDemand        int64             `json:"tpm_demand"`
	RPMLocal         *int64            `json:"rpm_local"`
	TPMLocal         *int64            `json:"tpm_local"`
	RPMReserve       int64             `json:"rpm_reserve"`
	TPMReserve       int64             `json:"tpm_reserve"`
	RPMHigh          int64             `json:"rpm_high"`
	TPMHigh          int64             `json:"tpm_high"`
}

func ptr[T any](v T) *T { return &v }

func TestJSONOutput(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	seed(t, dsn)

	keys := decodeJSON[[]keyJSON](t, mustRun(t, dsn, "keys", "--output", "json"))
	require.Len(t, keys, 2)
	api, batch := keys[0], keys[1]
	require.Equal(t, "api", api.Key)
	require.False(t, api.Unchecked, "checked at its last heartbeat")
	require.Equal(t, 20, api.LGlobal, "lower median of 40 and 20")
	require.Nil(t, api.MinLimit)
	require.Nil(t, api.MaxLimit)
	require.Equal(t, "lower_median", api.Aggregate)
	require.Positive(t, api.Epoch, "the key's epoch is its creation time in µs")
	require.Equal(t, 2, api.LiveNodes)
	require.Equal(t, 4, api.SumInflight)
	require.NotNil(t, api.Utilization)
	require.InDelta(t, 4.0/20.0, *api.Utilization, 1e-9)
	require.WithinDuration(t, time.Now(), api.CreatedAt, time.Minute)
	require.Equal(t, ptr(int64(500)), api.RPM, "lower median of the 600 and 500 the nodes learned")
	require.Equal(t, ptr(int64(90000)), api.TPM, "only node-a learned a token rate")
	require.Nil(t, api.RPMLimit, "no operator rate")
	require.Nil(t, api.TPMLimit)
	require.Equal(t, int64(500), api.SumRPMShare, "all of the rate is split by demand")
	require.Equal(t, int64(90000), api.SumTPMShare)
	require.Equal(t, "batch", batch.Key)
	require.Equal(t, 1, batch.LiveNodes, "worker-1's lease has run out")
	require.Nil(t, batch.RPM, "no rate is null")
	require.Nil(t, batch.TPM)
	require.Zero(t, batch.SumRPMShare)

	nodes := decodeJSON[[]nodeJSON](t, mustRun(t, dsn, "nodes", "api", "-o", "json"))
	require.Len(t, nodes, 2)
	a := nodes[0]
	require.Equal(t, "api", a.Key)
	require.Equal(t, "node-a", a.NodeID)
	require.Equal(t, "i-a", a.Instance)
	require.Equal(t, 40, a.LLocal)
	require.Equal(t, 3, a.Inflight)
	require.Equal(t, 10, a.Demand)
	require.Equal(t, "active", a.Status)
	require.False(t, a.Fenced)
	require.Equal(t, map[string]string{"zone": "a"}, a.Labels)
	require.Greater(t, a.LeaseRemainingMS, int64(59*time.Minute/time.Millisecond))
	require.GreaterOrEqual(t, a.HeartbeatAgeMS, int64(0))
	require.Equal(t, int64(375), a.RPMShare, "500 rpm split 300:100 by demand")
	require.Equal(t, int64(60000), a.TPMShare, "90000 tpm split 40000:20000 by demand")
	require.Equal(t, int64(270), a.RPMUsed)
	require.Equal(t, int64(28000), a.TPMUsed)
	require.Equal(t, int64(300), a.RPMDemand)
	require.Equal(t, int64(40000), a.TPMDemand)
	require.Equal(t, ptr(int64(600)), a.RPMLocal)
	require.Equal(t, ptr(int64(90000)), a.TPMLocal)
	require.Equal(t, int64(375), a.RPMReserve, "a live row holds back its rate share")
	require.Equal(t, int64(60000), a.TPMReserve)
	require.GreaterOrEqual(t, a.RPMHigh, int64(0))
	b := nodes[1]
	require.Equal(t, int64(125), b.RPMShare)
	require.Equal(t, int64(30000), b.TPMShare)
	require.Equal(t, ptr(int64(500)), b.RPMLocal)
	require.Nil(t, b.TPMLocal, "node-b learned no token rate")
	require.Equal(t, api.SumRPMShare, a.RPMShare+b.RPMShare, "keys sums the rate shares")
	require.Equal(t, api.SumTPMShare, a.TPMShare+b.TPMShare)
	require.Equal(t, api.SumRPMUsed, a.RPMUsed+b.RPMUsed)
	require.Equal(t, api.SumTPMUsed, a.TPMUsed+b.TPMUsed)
	require.Equal(t, api.SumShare, nodes[0].Share+nodes[1].Share, "keys sums the shares")
	require.Equal(t, 20, api.SumShare, "the shares have converged to L_global")

	batchNodes := decodeJSON[[]nodeJSON](t, mustRun(t, dsn, "nodes", "batch", "-o", "json"))
	require.Len(t, batchNodes, 2)
	require.Equal(t, "worker-1", batchNodes[0].NodeID)
	require.True(t, batchNodes[0].Fenced)
	require.LessOrEqual(t, batchNodes[0].LeaseRemainingMS, int64(0))
	require.Equal(t, map[string]string{}, batchNodes[1].Labels, "no labels is an empty object, not null")

	mustRun(t, dsn, "limits", "set", "api", "--min", "5", "--rpm", "450")
	type limitsJSON struct {
		Key       string `json:"key"`
		MinLimit  *int   `json:"min_limit"`
		MaxLimit  *int   `json:"max_limit"`
		LGlobal   int    `json:"l_global"`
		Aggregate string `json:"aggregate"`
		RPMLimit  *int64 `json:"rpm_limit"`
		TPMLimit  *int64 `json:"tpm_limit"`
		RPM       *int64 `json:"rpm"`
		TPM       *int64 `json:"tpm"`
	}
	lim := decodeJSON[limitsJSON](t, mustRun(t, dsn, "limits", "get", "api", "-o", "json"))
	require.Equal(t, "api", lim.Key)
	require.NotNil(t, lim.MinLimit)
	require.Equal(t, 5, *lim.MinLimit)
	require.Nil(t, lim.MaxLimit)
	require.Equal(t, ptr(int64(450)), lim.RPMLimit)
	require.Nil(t, lim.TPMLimit)
	require.Equal(t, ptr(int64(500)), lim.RPM, "the key's rate changes at its next heartbeat")
	require.Equal(t, ptr(int64(90000)), lim.TPM)
	keys = decodeJSON[[]keyJSON](t, mustRun(t, dsn, "keys", "--output", "json"))
	require.Equal(t, ptr(int64(450)), keys[0].RPMLimit)
	require.Nil(t, keys[0].TPMLimit)

	type migrationJSON struct {
		Version   int64      `json:"version"`
		Name      string     `json:"name"`
		State     string     `json:"state"`
		AppliedAt *time.Time `json:"applied_at"`
	}
	st := decodeJSON[[]migrationJSON](t, mustRun(t, dsn, "migrate", "status", "-o", "json"))
	require.NotEmpty(t, st)
	for i, m := range st {
		require.Equal(t, int64(i+1), m.Version)
		require.Equal(t, "applied", m.State)
		require.NotNil(t, m.AppliedAt)
		require.True(t, strings.HasSuffix(m.Name, ".sql"), m.Name)
	}

	type watchJSON struct {
		Time time.Time `json:"time"`
		keyJSON
		Nodes []nodeJSON `json:"nodes"`
	}
	lines := strings.Split(strings.TrimSpace(mustRun(t, dsn, "watch", "api", "--count", "3", "--interval", "20ms", "-o", "json")), "\n")
	require.Len(t, lines, 3)
	for _, line := range lines {
		w := decodeJSON[watchJSON](t, line)
		require.Equal(t, "api", w.Key)
		require.Equal(t, 20, w.LGlobal)
		require.Equal(t, ptr(int64(450)), w.RPMLimit)
		require.Equal(t, int64(500), w.SumRPMShare)
		require.Len(t, w.Nodes, 2)
		require.Equal(t, int64(375), w.Nodes[0].RPMShare)
		require.WithinDuration(t, time.Now(), w.Time, time.Minute)
	}
}

func jsonDecoder(s string) *json.Decoder { return json.NewDecoder(strings.NewReader(s)) }
