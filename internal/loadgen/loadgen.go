// Package loadgen is the continuous writer the integration and end-to-end suites run through
// a real client while they change a cluster: it remembers which writes were acknowledged, so
// a test can read every one of them back afterwards and count what an operation lost.
package loadgen

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Options shape a Writer.
type Options struct {
	Prefix  string        // keys are Prefix+<i>, values Value(i)
	Timeout time.Duration // per write (default 1s)
	Pace    time.Duration // pause between writes (0 = none)
	// Replicas > 0 sends WAIT Replicas after each SET, on the same connection, and counts a
	// write as acknowledged only when that many replicas have it: what survives a crash of
	// the primary. A write the primary took but no replica confirmed is counted apart.
	Replicas int
	// Record keeps every write's Outcome, in order (Writer.Outcomes, Result.Outcomes).
	Record bool
}

// Outcome is one write as the Writer saw it end: when, and whether it was acknowledged.
type Outcome struct {
	End   time.Time
	Acked bool
}

// Writer writes until stopped.
type Writer struct {
	c    valkey.Client
	o    Options
	stop chan struct{}
	done chan struct{}

	mu          sync.Mutex
	acked       []int
	failed      int
	unconfirmed []int
	lastAck     time.Time
	maxPause    time.Duration
	outcomes    []Outcome
	errs        map[string]int
	// sinceAck are the writes that failed since the last acknowledged one; longest is the
	// longest pause so far with the failures inside it.
	sinceAck []Failure
	longest  Pause
}

// Failure is one write that was not acknowledged: when it was sent and ended, its key and why.
type Failure struct {
	Start, End time.Time
	Key        string
	Err        string
}

// Pause is the longest stretch between two acknowledged writes and the writes that failed
// in it, so a report can say what a pause was made of (a write that hung until its timeout,
// a run of refusals from one address).
type Pause struct {
	From     time.Time // the acknowledged write before the pause ended
	Length   time.Duration
	Failures []Failure // at most maxPauseFailures, the first ones
	// AckSent is when the write that ended the pause was sent: a write that waited out most
	// of the pause (a paused or slow server) shows here.
	AckSent time.Time
}

// maxPauseFailures bounds Pause.Failures.
const maxPauseFailures = 64

// String describes the pause with its failures' times relative to its start.
func (p Pause) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s from %s", p.Length.Round(time.Millisecond), p.From.UTC().Format("15:04:05.000"))
	for _, f := range p.Failures {
		fmt.Fprintf(&b, "\n  +%s..+%s %s: %s", f.Start.Sub(p.From).Round(time.Millisecond), f.End.Sub(p.From).Round(time.Millisecond), f.Key, f.Err)
	}
	fmt.Fprintf(&b, "\n  +%s..+%s acknowledged", p.AckSent.Sub(p.From).Round(time.Millisecond), p.Length.Round(time.Millisecond))
	return b.String()
}

// maxErrorKinds bounds Result.Errors: enough to tell a refusal from a timeout.
const maxErrorKinds = 8

// Result is what a stopped Writer saw.
type Result struct {
	Acked       []int         // indexes of acknowledged writes, in order
	Failed      int           // writes refused or timed out: never acknowledged, so never lost
	Unconfirmed int           // with Replicas: taken by the primary, not confirmed by replicas
	MaxPause    time.Duration // the longest time between two acknowledged writes
	Longest     Pause         // that pause, with the writes that failed in it
	Outcomes    []Outcome     // with Record: every write, in order
	// UnconfirmedIdx are the indexes of the Unconfirmed writes, in order: with Acked, every
	// write the primary acknowledged.
	UnconfirmedIdx []int
	// Errors counts failed writes by error text (the first maxErrorKinds kinds; "other"
	// beyond), so a report can say why writes failed.
	Errors map[string]int
}

// AckedBefore is the indexes of the recorded writes (Options.Record) acknowledged before t:
// what a snapshot that started at t must hold.
func (r Result) AckedBefore(t time.Time) []int {
	var out []int
	for i, o := range r.Outcomes {
		if o.Acked && o.End.Before(t) {
			out = append(out, i)
		}
	}
	return out
}

// Value is the value written under index i.
func Value(i int) string { return "v" + strconv.Itoa(i) }

// Start begins writing through c.
func Start(c valkey.Client, o Options) *Writer {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	w := &Writer{c: c, o: o, stop: make(chan struct{}), done: make(chan struct{}), lastAck: time.Now()}
	go w.run()
	return w
}

func (w *Writer) run() {
	defer close(w.done)
	for i := 0; ; i++ {
		select {
		case <-w.stop:
			return
		default:
		}
		start := time.Now()
		acked, taken, err := w.write(i)
		now := time.Now()
		w.mu.Lock()
		if err != nil {
			w.countError(err)
		}
		if !acked && len(w.sinceAck) < maxPauseFailures {
			why := "not confirmed by the replicas"
			if err != nil {
				why = err.Error()
			}
			w.sinceAck = append(w.sinceAck, Failure{Start: start, End: now, Key: w.o.Prefix + strconv.Itoa(i), Err: why})
		}
		if w.o.Record {
			w.outcomes = append(w.outcomes, Outcome{End: now, Acked: acked})
		}
		switch {
		case acked:
			if pause := now.Sub(w.lastAck); pause > w.maxPause {
				w.maxPause = pause
				w.longest = Pause{From: w.lastAck, Length: pause, Failures: w.sinceAck, AckSent: start}
			}
			w.sinceAck = nil
			w.lastAck = now
			w.acked = append(w.acked, i)
		case taken:
			w.unconfirmed = append(w.unconfirmed, i)
		default:
			w.failed++
		}
		w.mu.Unlock()
		if w.o.Pace > 0 {
			time.Sleep(w.o.Pace)
		}
	}
}

// write sends one SET (and WAIT): acked when it counts as acknowledged, taken when the
// primary took it without the replicas confirming it; err says why a write failed.
func (w *Writer) write(i int) (acked, taken bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), w.o.Timeout)
	defer cancel()
	set := w.c.B().Set().Key(w.o.Prefix + strconv.Itoa(i)).Value(Value(i)).Build()
	if w.o.Replicas == 0 {
		err := w.c.Do(ctx, set).Error()
		return err == nil, false, err
	}
	// A keyless WAIT in the same pipeline as a keyed SET goes to the same node.
	wait := w.c.B().Wait().Numreplicas(int64(w.o.Replicas)).Timeout(w.o.Timeout.Milliseconds() / 2).Build()
	res := w.c.DoMulti(ctx, set, wait)
	if err := res[0].Error(); err != nil {
		return false, false, err
	}
	n, err := res[1].AsInt64()
	return err == nil && n >= int64(w.o.Replicas), true, nil
}

// countError adds err to the error counts (w.mu held).
func (w *Writer) countError(err error) {
	if w.errs == nil {
		w.errs = map[string]int{}
	}
	key := err.Error()
	if len(key) > 80 {
		key = key[:80]
	}
	if _, ok := w.errs[key]; !ok && len(w.errs) >= maxErrorKinds {
		key = "other"
	}
	w.errs[key]++
}

// Acked is how many writes were acknowledged so far.
func (w *Writer) Acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// Outcomes is a copy of the outcomes recorded so far (with Record).
func (w *Writer) Outcomes() []Outcome {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Outcome(nil), w.outcomes...)
}

// Stop ends the writer and returns what it saw.
func (w *Writer) Stop() Result {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return Result{Acked: w.acked, Failed: w.failed, Unconfirmed: len(w.unconfirmed), UnconfirmedIdx: w.unconfirmed, MaxPause: w.maxPause, Longest: w.longest, Outcomes: w.outcomes, Errors: w.errs}
}

// Missing reads prefix+<i> for every i in keys through c and counts those that are gone or
// hold anything but Value(i); first describes the first such key.
func Missing(ctx context.Context, c valkey.Client, prefix string, keys []int) (missing int, first error) {
	const batch = 1000
	for start := 0; start < len(keys); start += batch {
		idx := keys[start:min(len(keys), start+batch)]
		cmds := make(valkey.Commands, len(idx))
		for j, i := range idx {
			cmds[j] = c.B().Get().Key(prefix + strconv.Itoa(i)).Build()
		}
		for j, r := range c.DoMulti(ctx, cmds...) {
			if v, err := r.ToString(); err != nil || v != Value(idx[j]) {
				missing++
				if first == nil {
					first = fmt.Errorf("key %s%d: %q %v", prefix, idx[j], v, err)
				}
			}
		}
	}
	return missing, first
}

// Outage describes a writer's outage after t0 (say, the loss of a primary) from its recorded
// outcomes. resumed runs from t0 to the first acknowledged write after the last failed one
// after t0; gap runs from the last acknowledged write before the first failure after t0 (or
// from t0 if there is none) to that same write. With no failure after t0, the outage is the
// longest pause between two acknowledged writes that ends after t0. failed counts the
// failures after t0.
func Outage(outcomes []Outcome, t0 time.Time) (resumed, gap time.Duration, failed int, err error) {
	firstFail, lastFail := -1, -1
	for i, o := range outcomes {
		if !o.Acked && o.End.After(t0) {
			if firstFail < 0 {
				firstFail = i
			}
			lastFail, failed = i, failed+1
		}
	}
	first := -1 // the write that ends the outage
	if lastFail >= 0 {
		for i := lastFail + 1; i < len(outcomes) && first < 0; i++ {
			if outcomes[i].Acked {
				first = i
			}
		}
		if first < 0 {
			return 0, 0, failed, fmt.Errorf("no acknowledged write after the last failure (%d writes, %d failed after t0)", len(outcomes), failed)
		}
	} else {
		var longest time.Duration
		prev := -1
		for i, o := range outcomes {
			if !o.Acked {
				continue
			}
			if prev >= 0 && o.End.After(t0) && o.End.Sub(outcomes[prev].End) > longest {
				longest, first = o.End.Sub(outcomes[prev].End), i
			}
			prev = i
		}
		if first < 0 {
			return 0, 0, 0, fmt.Errorf("no acknowledged write after t0 (%d writes)", len(outcomes))
		}
		firstFail = first
	}
	before := t0
	for i := firstFail - 1; i >= 0; i-- {
		if outcomes[i].Acked {
			before = outcomes[i].End
			break
		}
	}
	return outcomes[first].End.Sub(t0), outcomes[first].End.Sub(before), failed, nil
}

// Fill writes prefix+<i> = value(i) (Value(i) when value is nil) for i in 0..n-1 through c,
// in pipelined batches of batch SETs (default 5000), each bounded by a minute.
func Fill(ctx context.Context, c valkey.Client, prefix string, n, batch int, value func(i int) string) error {
	if value == nil {
		value = Value
	}
	if batch <= 0 {
		batch = 5000
	}
	for i := 0; i < n; i += batch {
		cmds := make(valkey.Commands, 0, batch)
		for j := i; j < min(n, i+batch); j++ {
			cmds = append(cmds, c.B().Set().Key(prefix+strconv.Itoa(j)).Value(value(j)).Build())
		}
		bctx, cancel := context.WithTimeout(ctx, time.Minute)
		res := c.DoMulti(bctx, cmds...)
		cancel()
		for j, r := range res {
			if err := r.Error(); err != nil {
				return fmt.Errorf("fill at key %s%d: %w", prefix, i+j, err)
			}
		}
	}
	return nil
}
