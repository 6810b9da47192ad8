package pace

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkPacerReserveSettle is the hot path of a request that need not
// wait: debit one request and an estimate, then settle the actual usage.
func BenchmarkPacerReserveSettle(b *testing.B) {
	p, err := New(Config{RequestRate: 1e9, TokenRate: 1e12}, epoch)
	require.NoError(b, err)
	now := epoch
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		tk, _, _ := p.Reserve(now, 1000)
		_ = p.Settle(now, tk, 900)
	}
}

// BenchmarkPacerReserveSettleParallel is the same from every P at once.
func BenchmarkPacerReserveSettleParallel(b *testing.B) {
	p, err := New(Config{RequestRate: 1e9, TokenRate: 1e12}, epoch)
	require.NoError(b, err)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := epoch
		for pb.Next() {
			now = now.Add(time.Microsecond)
			tk, _, _ := p.Reserve(now, 1000)
			_ = p.Settle(now, tk, 900)
		}
	})
}

// BenchmarkPacerWaitNoDelay is Wait when the buckets have room: one
// time.Now and the two debits.
func BenchmarkPacerWaitNoDelay(b *testing.B) {
	p, err := New(Config{RequestRate: 1e9, TokenRate: 1e12}, time.Now())
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Wait(ctx, 1000); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBucketReserveWaiting reserves in a bucket deep in debt, the
// path of a request that must wait.
func BenchmarkBucketReserveWaiting(b *testing.B) {
	bk, err := NewBucket(BucketConfig{Rate: 1}, epoch)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		_, _, _ = bk.Reserve(epoch, 1)
	}
}

// BenchmarkLearnerRecord counts one response.
func BenchmarkLearnerRecord(b *testing.B) {
	l, err := NewLearner(LearnerConfig{SeedRate: 10}, epoch)
	require.NoError(b, err)
	now := epoch
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		l.Record(now, false)
	}
}

// TestHotPathAllocatesNothing backs the package's claim about allocations.
// It does not run in parallel: AllocsPerRun counts the whole process.
func TestHotPathAllocatesNothing(t *testing.T) {
	p, err := New(Config{RequestRate: 1e9, TokenRate: 1e12}, time.Now())
	require.NoError(t, err)
	l, err := NewLearner(LearnerConfig{SeedRate: 10}, time.Now())
	require.NoError(t, err)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		now := time.Now()
		tk, _, _ := p.Reserve(now, 1000)
		_ = p.Delay(now, tk)
		_ = p.Settle(now, tk, 900)
		tk, _ = p.Wait(ctx, 1000)
		p.Cancel(time.Now(), tk)
		l.Record(now, false)
		_ = l.Rate(now)
	})
	require.Zero(t, allocs)
}
