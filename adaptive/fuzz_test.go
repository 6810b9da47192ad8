package adaptive

import (
	"math"
	"testing"
	"time"
)

const maxFuzzOps = 1000

// FuzzEstimate drives a limiter through arbitrary sequences of admissions,
// round-trip times, drops, ceilings and peer loads, and checks that the
// estimate stays finite and within [MinLimit, MaxLimit] and that the
// in-flight count matches the leases held.
//
// setup picks the configuration; ops is read as (opcode, argument) pairs,
// at most maxFuzzOps of them.
func FuzzEstimate(f *testing.F) {
	f.Add(uint8(0), []byte{0, 0, 1, 10, 2, 0})
	f.Add(uint8(1), []byte{0, 0, 0, 0, 1, 200, 3, 0, 3, 1, 0, 0, 1, 1, 2, 0})
	f.Add(uint8(2), []byte{5, 255, 0, 0, 1, 3, 2, 0, 0, 0, 1, 255, 2, 0})
	f.Add(uint8(7), []byte{6, 2, 0, 0, 0, 0, 0, 0, 1, 9, 4, 1, 2, 0, 6, 255, 7, 255})
	f.Add(uint8(13), []byte{8, 5, 0, 0, 1, 255, 2, 0, 1, 1, 0, 0, 2, 0})
	f.Add(uint8(255), []byte{0, 0, 1, 0, 2, 0, 0, 0, 1, 255, 3, 0, 7, 0, 0, 0, 2, 0})

	f.Fuzz(func(t *testing.T, setup uint8, ops []byte) {
		cfg := Config{
			InitialLimit: 10,
			MinLimit:     1 + int(setup>>5&1),
			MaxLimit:     64,
			Law:          Law(setup & 1),
			Tolerance:    1 + float64(setup>>1&3),
			Smoothing:    []float64{0.2, 1, 0.01, 0.5}[setup>>3&3],
			RTTWindow:    1 + int(setup>>6)*7,
		}
		if setup&4 != 0 {
			cfg.MaxHealthyRTT = 50 * time.Millisecond
			cfg.LatencyTarget = 20 * time.Millisecond
		}
		if setup&128 != 0 {
			cfg.Recalibration = Recalibration{Interval: time.Second, Jitter: time.Millisecond}
		}
		clk := newFakeClock()
		cfg.Clock = clk
		l, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var leases []Lease

		check := func() {
			snap := l.Snapshot()
			if e := snap.Estimate; math.IsNaN(e) || e < float64(cfg.MinLimit) || e > float64(cfg.MaxLimit) {
				t.Fatalf("estimate %v outside [%d, %d]", e, cfg.MinLimit, cfg.MaxLimit)
			}
			if snap.Inflight != len(leases) {
				t.Fatalf("in flight %d, holding %d leases", snap.Inflight, len(leases))
			}
			if snap.Inflight > cfg.MaxLimit {
				t.Fatalf("in flight %d above MaxLimit %d", snap.Inflight, cfg.MaxLimit)
			}
		}
		take := func(arg byte) (Lease, bool) {
			if len(leases) == 0 {
				return Lease{}, false
			}
			i := int(arg) % len(leases)
			le := leases[i]
			leases = append(leases[:i], leases[i+1:]...)
			return le, true
		}

		ops = ops[:min(len(ops), 2*maxFuzzOps)]
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%9, ops[i+1]
			switch op {
			case 0:
				if le, ok := l.TryAcquire(); ok {
					leases = append(leases, le)
				}
			case 1:
				// From nanoseconds to minutes.
				clk.Advance(time.Duration(arg&31) << (arg >> 5 * 5))
			case 2:
				if le, ok := take(arg); ok {
					le.Release()
				}
			case 3:
				if le, ok := take(arg); ok {
					le.Drop()
				}
			case 4:
				if le, ok := take(arg); ok {
					le.Ignore()
				}
			case 5:
				l.SetPeerInflight(int(arg) * 4)
			case 6:
				if arg == 255 {
					l.ClearCeiling()
				} else {
					l.SetCeiling(int(arg))
				}
			case 7:
				l.SetEstimate(float64(arg) * 0.5)
			case 8:
				l.RetryAfter(time.Duration(arg) * time.Millisecond)
			}
			check()
		}
		for _, le := range leases {
			le.Release()
		}
		leases = nil
		check()
	})
}
