package coord

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Validate reports whether r is within the bounds the coordinator accepts.
// The error wraps ErrInvalidReport and names the first offending field and
// its value. Fields are checked in a fixed order: rate_used, rate_local,
// rate_demand, rate_applied, key, node_id, instance, seq, l_local, inflight, demand,
// epoch, applied_gen, lease_ttl, max_request_duration, labels. LeaseTTL and
// MaxRequestDuration are judged after truncation to whole microseconds, the
// precision the coordinator keeps.
func (r Report) Validate() error {
	if err := checkRates("rate_used", r.RateUsed); err != nil {
		return err
	}
	if err := checkRates("rate_local", r.RateLocal); err != nil {
		return err
	}
	if err := checkRates("rate_demand", r.RateDemand); err != nil {
		return err
	}
	if err := checkRates("rate_applied", r.RateApplied); err != nil {
		return err
	}
	if err := checkName("key", r.Key, 1); err != nil {
		return err
	}
	if err := checkName("node_id", r.NodeID, 1); err != nil {
		return err
	}
	if err := checkName("instance", r.Instance, 1); err != nil {
		return err
	}
	if r.Seq < 0 {
		return fmt.Errorf("%w: seq = %d, want >= 0", ErrInvalidReport, r.Seq)
	}
	if err := checkCount("l_local", r.LLocal, 1); err != nil {
		return err
	}
	if err := checkCount("inflight", r.Inflight, 0); err != nil {
		return err
	}
	if err := checkCount("demand", r.Demand, 0); err != nil {
		return err
	}
	if r.Epoch < 0 {
		return fmt.Errorf("%w: epoch = %d, want >= 0", ErrInvalidReport, r.Epoch)
	}
	if r.AppliedGen < 0 {
		return fmt.Errorf("%w: applied_gen = %d, want >= 0", ErrInvalidReport, r.AppliedGen)
	}
	if ttl := leaseTTL(r); ttl < MinLeaseTTL || ttl > MaxLeaseTTL {
		return fmt.Errorf("%w: lease_ttl = %s, want %s..%s", ErrInvalidReport, r.LeaseTTL, MinLeaseTTL, MaxLeaseTTL)
	}
	if b := requestBound(r); b < 0 || b > MaxRequestBound {
		return fmt.Errorf("%w: max_request_duration = %s, want 0s..%s", ErrInvalidReport, r.MaxRequestDuration, MaxRequestBound)
	}
	if len(r.Labels) > MaxLabels {
		return fmt.Errorf("%w: labels: %d entries, want at most %d", ErrInvalidReport, len(r.Labels), MaxLabels)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Labels)) {
		if err := checkName("label name", name, 1); err != nil {
			return err
		}
		if err := checkName(fmt.Sprintf("label %.40q", name), r.Labels[name], 0); err != nil {
			return err
		}
	}
	return nil
}

// leaseTTL is the report's lease length at the coordinator's precision.
func leaseTTL(r Report) time.Duration {
	return r.LeaseTTL.Truncate(time.Microsecond)
}

// requestBound is the report's request bound at the coordinator's precision.
func requestBound(r Report) time.Duration {
	return r.MaxRequestDuration.Truncate(time.Microsecond)
}

// Validate reports whether d is within the bounds the coordinator accepts;
// the error wraps ErrInvalidReport and names the first bad field. Hold is
// judged after truncation to whole microseconds.
func (d Departure) Validate() error {
	for _, f := range []struct{ name, v string }{{"key", d.Key}, {"node_id", d.NodeID}, {"instance", d.Instance}} {
		if err := checkName(f.name, f.v, 1); err != nil {
			return err
		}
	}
	if err := checkCount("inflight", d.Inflight, 0); err != nil {
		return err
	}
	if h := d.Hold.Truncate(time.Microsecond); h < 0 || h > MaxRequestBound {
		return fmt.Errorf("%w: hold = %s, want 0s..%s", ErrInvalidReport, d.Hold, MaxRequestBound)
	}
	return nil
}

func checkName(field, s string, minBytes int) error {
	switch {
	case len(s) < minBytes || len(s) > MaxNameBytes:
		return fmt.Errorf("%w: %s: %d bytes, want %d..%d", ErrInvalidReport, field, len(s), minBytes, MaxNameBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s: %.40q is not valid UTF-8", ErrInvalidReport, field, s)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s: %.40q contains a NUL byte", ErrInvalidReport, field, s)
	}
	return nil
}

func checkCount(field string, v, lowest int) error {
	if v < lowest || v > MaxCount {
		return fmt.Errorf("%w: %s = %d, want %d..%d", ErrInvalidReport, field, v, lowest, MaxCount)
	}
	return nil
}

// validateLimits checks an operator's min/max override; nil means no bound.
func validateLimits(minLimit, maxLimit *int) error {
	for _, l := range []struct {
		name string
		v    *int
	}{{"min", minLimit}, {"max", maxLimit}} {
		if l.v != nil && (*l.v < 1 || *l.v > MaxCount) {
			return fmt.Errorf("%w: %s = %d, want 1..%d", ErrInvalidOverride, l.name, *l.v, MaxCount)
		}
	}
	if minLimit != nil && maxLimit != nil && *maxLimit < *minLimit {
		return fmt.Errorf("%w: max = %d is below min = %d", ErrInvalidOverride, *maxLimit, *minLimit)
	}
	return nil
}

// validateAggregate checks an operator's aggregate choice.
func validateAggregate(a Aggregate) error {
	switch a {
	case AggregateLowerMedian, AggregateMin:
		return nil
	}
	return fmt.Errorf("%w: aggregate = %.40q, want %q or %q", ErrInvalidOverride, string(a), AggregateLowerMedian, AggregateMin)
}

// checkKeyName reports, as ErrInvalidOverride, a key name no row can hold.
func checkKeyName(key string) error {
	if !ValidName(key) {
		return fmt.Errorf("%w: key %.40q: want 1..%d bytes of UTF-8 without NUL", ErrInvalidOverride, key, MaxNameBytes)
	}
	return nil
}
