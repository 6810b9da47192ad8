// Package bubble runs testing/synctest tests so that the race detector
// does not crash on them.
//
// Go 1.26's runtime runs a bubble's timers under one race context per
// bubble, on whichever thread fires them: the root goroutine when the
// bubble's clock advances, and any bubbled goroutine that sets a timer
// already due (time.NewTimer(0), time.AfterFunc(0, f)) or reads the
// channel of a timer that expired while nobody waited on it. When two
// threads do so at once they share the race runtime's per-goroutine
// state, and the process dies in the race runtime (SIGSEGV in
// __sanitizer::StackDepotBase::Put or __tsan::SlotLock, or "ThreadSanitizer:
// CHECK failed: tsan_rtl.cpp:346"). One processor rules that out: Test
// holds GOMAXPROCS at 1 while any bubble runs, under the race detector
// only. Race detection does not depend on the number of processors: it
// reports accesses not ordered by happens-before, whichever thread ran
// them.
package bubble

import (
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
)

var (
	mu      sync.Mutex
	running int // bubbles started by Test and not yet ended
	saved   int // GOMAXPROCS before the first of them
)

// Test is synctest.Test; under the race detector GOMAXPROCS is 1 from
// before f's bubble starts until the last bubble Test started ends, and
// is then set back. It is safe to call from parallel tests.
func Test(t *testing.T, f func(*testing.T)) {
	t.Helper()
	if raceEnabled {
		oneProc()
		defer restoreProcs()
	}
	synctest.Test(t, f)
}

func oneProc() {
	mu.Lock()
	defer mu.Unlock()
	if running == 0 {
		saved = runtime.GOMAXPROCS(1)
	}
	running++
}

func restoreProcs() {
	mu.Lock()
	defer mu.Unlock()
	running--
	if running == 0 {
		runtime.GOMAXPROCS(saved)
	}
}
