package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What the fleet scenario reads off the operator process and its metrics endpoint.

func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// usage samples the operator process's RSS (every 250 ms) and reads its CPU time.
type usage struct {
	pid      int
	mu       sync.Mutex
	peak     float64 // MiB since the last mark
	cpuStart float64
	done     chan struct{}
}

func startUsage(pid int) *usage {
	u := &usage{pid: pid, done: make(chan struct{}), cpuStart: cpuSeconds(pid)}
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-u.done:
				return
			case <-t.C:
				if v := rssMiB(pid); v > 0 {
					u.mu.Lock()
					u.peak = max(u.peak, v)
					u.mu.Unlock()
				}
			}
		}
	}()
	return u
}

// mark returns the largest RSS since the last mark and starts a new period.
func (u *usage) mark() float64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := max(u.peak, rssMiB(u.pid))
	u.peak = 0
	return p
}

func (u *usage) cpuSeconds() float64 { return cpuSeconds(u.pid) - u.cpuStart }
func (u *usage) stop()               { close(u.done) }

func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.Fields(rest)[0], 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuSeconds is the process's user+system time (/proc/<pid>/stat fields 14 and 15).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(b), ") ") // the command name may hold spaces
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}
