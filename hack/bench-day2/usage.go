package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
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

// saveHeapProfile writes the operator's heap profile to -operator-heap-profile (if set), for
// `go tool pprof`, and beside it the same in text with the runtime's MemStats (.txt) and the
// process's /proc smaps_rollup (.smaps): what the idle RSS is made of.
func (b *bench) saveHeapProfile(ctx context.Context) error {
	if b.pprofURL == "" {
		return nil
	}
	for file, query := range map[string]string{*heapProfile: "heap", *heapProfile + ".txt": "heap?debug=1"} {
		if err := fetchTo(ctx, b.pprofURL+query, file); err != nil {
			return fmt.Errorf("operator heap profile: %w", err)
		}
	}
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", b.op.Pid()))
	if err != nil {
		return err
	}
	if err := os.WriteFile(*heapProfile+".smaps", smaps, 0o644); err != nil {
		return err
	}
	logf("operator heap profile written to %s (and .txt, .smaps)", *heapProfile)
	return nil
}

func fetchTo(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
