package adaptive

import (
	"context"
	"runtime"
	"testing"
)

func BenchmarkTryAcquireRelease(b *testing.B) {
	l, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		le, ok := l.TryAcquire()
		if !ok {
			b.Fatal("refused")
		}
		le.Release()
	}
}

func BenchmarkTryAcquireReleaseParallel(b *testing.B) {
	l, err := New(Config{InitialLimit: 1000})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if le, ok := l.TryAcquire(); ok {
				le.Release()
			}
		}
	})
}

func BenchmarkReject(b *testing.B) {
	l, err := New(Config{InitialLimit: 1, MaxLimit: 1})
	if err != nil {
		b.Fatal(err)
	}
	held, _ := l.TryAcquire()
	defer held.Release()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := l.TryAcquire(); ok {
			b.Fatal("admitted past the limit")
		}
	}
}

// BenchmarkAcquireHandoff measures a blocked Acquire being handed the slot
// that another goroutine releases.
func BenchmarkAcquireHandoff(b *testing.B) {
	l, err := New(Config{InitialLimit: 1, MaxLimit: 1, MaxQueued: 1})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	held, _ := l.TryAcquire()
	handed := make(chan Lease)
	n := b.N
	go func() {
		for range n {
			le, err := l.Acquire(ctx)
			if err != nil {
				panic(err)
			}
			handed <- le
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for range n {
		for l.Queued() == 0 {
			runtime.Gosched()
		}
		held.Release()
		held = <-handed
	}
	b.StopTimer()
	held.Release()
}
