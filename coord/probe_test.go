package coord

import (
	"fmt"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	for _, m := range []model{
		{nodes: 2, l: 2, maxReports: 1, maxReplies: 1, demandSlack: 1, drain: true},
		{nodes: 2, l: 2, maxReports: 1, maxReplies: 1, demandSlack: 1, evict: true},
		{nodes: 2, l: 2, maxReports: 1, maxReplies: 2, demandSlack: 1, evict: true},
		{nodes: 2, l: 2, maxReports: 1, maxReplies: 1, demandSlack: 1, raises: []int{3}},
		{nodes: 2, l: 3, maxReports: 1, maxReplies: 1, demandSlack: 1, lowers: []int{1}, raises: []int{3}},
		{nodes: 2, l: 2, maxReports: 1, maxReplies: 1, demandSlack: 1},
		{nodes: 2, l: 3, maxReports: 1, maxReplies: 1, demandSlack: 1},
		{nodes: 2, l: 4, maxReports: 1, maxReplies: 1, demandSlack: 1},
	} {
		t.Run(fmt.Sprintf("%+v", m), func(t *testing.T) {
			m.reserve, m.lemma = NodeState.Reserve, true
			start := time.Now()
			states, trace := m.search(t, 5_000_000)
			t.Logf("%d states in %s (trace %d)", states, time.Since(start).Round(time.Millisecond), len(trace))
		})
	}
}
