package loadgen

import (
	"slices"
	"testing"
	"time"
)

// outcomes builds outcomes 100 ms apart starting at base+100ms from a pattern of
// '+' (acknowledged) and '-' (failed).
func outcomes(base time.Time, pattern string) []Outcome {
	out := make([]Outcome, len(pattern))
	for i, c := range pattern {
		out[i] = Outcome{End: base.Add(time.Duration(i+1) * 100 * time.Millisecond), Acked: c == '+'}
	}
	return out
}

func TestOutage(t *testing.T) {
	base := time.Unix(1000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name         string
		pattern      string
		t0           time.Duration // after base
		resumed, gap time.Duration
		failed       int
		wantErr      bool
	}{
		// writes end at 100..800 ms; t0 at 250 ms; failures at 400, 500 and 700 ms; the last
		// ack before them at 300 ms, the first after them at 800 ms.
		{name: "failures", pattern: "+++--+-+", t0: ms(250), resumed: ms(550), gap: ms(500), failed: 3},
		// a failure before t0 does not count
		{name: "failure before t0", pattern: "+-+++-++", t0: ms(450), resumed: ms(250), gap: ms(200), failed: 1},
		// the first write after t0 fails: the gap runs from the ack before t0
		{name: "failure right after t0", pattern: "+--+", t0: ms(150), resumed: ms(250), gap: ms(300), failed: 2},
		// no ack at all before the failure: the gap runs from t0
		{name: "no ack before", pattern: "--+", t0: ms(50), resumed: ms(250), gap: ms(250), failed: 2},
		// no failure after t0: the longest pause between two acks ending after t0
		{name: "no failure", pattern: "++-+++", t0: ms(350), resumed: ms(50), gap: ms(200), failed: 0},
		{name: "never resumed", pattern: "++--", t0: ms(150), failed: 2, wantErr: true},
		{name: "nothing after t0", pattern: "++", t0: ms(500), wantErr: true},
		{name: "empty", pattern: "", t0: 0, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resumed, gap, failed, err := Outage(outcomes(base, tc.pattern), base.Add(tc.t0))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if failed != tc.failed {
				t.Errorf("failed = %d, want %d", failed, tc.failed)
			}
			if tc.wantErr {
				return
			}
			if resumed != tc.resumed || gap != tc.gap {
				t.Errorf("resumed, gap = %s, %s; want %s, %s", resumed, gap, tc.resumed, tc.gap)
			}
		})
	}
}

func TestPauseString(t *testing.T) {
	from := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return from.Add(time.Duration(ms) * time.Millisecond) }
	p := Pause{From: from, Length: 1005 * time.Millisecond, AckSent: at(1004), Failures: []Failure{
		{Start: at(2), End: at(1002), Key: "k1", Err: "context deadline exceeded"},
		{Start: at(1002), End: at(1003), Key: "k2", Err: "connection refused"},
	}}
	want := "1.005s from 10:00:00.000\n" +
		"  +2ms..+1.002s k1: context deadline exceeded\n" +
		"  +1.002s..+1.003s k2: connection refused\n" +
		"  +1.004s..+1.005s acknowledged"
	if got := p.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// AckedBefore keeps the acknowledged writes that ended strictly before t.
func TestAckedBefore(t *testing.T) {
	base := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	r := Result{Outcomes: outcomes(base, "+-++-+")} // ends at 100, 200, ... 600 ms
	for _, tc := range []struct {
		at   time.Duration
		want []int
	}{
		{0, nil},
		{300 * time.Millisecond, []int{0}}, // write 2 ends at 300 ms: not before
		{301 * time.Millisecond, []int{0, 2}},
		{time.Second, []int{0, 2, 3, 5}},
	} {
		if got := r.AckedBefore(base.Add(tc.at)); !slices.Equal(got, tc.want) {
			t.Errorf("AckedBefore(+%s) = %v, want %v", tc.at, got, tc.want)
		}
	}
}
