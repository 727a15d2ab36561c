package backup

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/reconciler/views"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// TestParseSchedule: the five standard fields and the descriptors parse; what the schema
// lets through and the cron parser refuses, a time zone, and a schedule that never comes
// due are ErrScheduleInvalid, naming the schedule.
func TestParseSchedule(t *testing.T) {
	for _, tc := range []struct {
		spec  string
		valid bool
	}{
		{"0 3 * * *", true},
		{"*/5 * * * 1-5", true},
		{"@daily", true},
		{"@every 15s", true},
		{"@every 1h30m", true},
		{"0 5-1 * * *", false}, // a range the schema's shape check lets through
		{"0 0 30 2 *", false},  // February 30th: never due
		{"CRON_TZ=UTC 0 3 * * *", false},
		{"TZ=Europe/Paris @daily", false},
		{"@every soon", false},
		{"", false},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			sched, err := ParseSchedule(tc.spec)
			if tc.valid {
				require.NoError(t, err)
				assert.NotNil(t, sched)
				return
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrScheduleInvalid), "typed: %v", err)
			assert.Contains(t, err.Error(), `"`+tc.spec+`"`)
		})
	}
}

// TestParseScheduleIsUTC: a five-field schedule comes due at its hour in UTC whatever the
// process's local zone is.
func TestParseScheduleIsUTC(t *testing.T) {
	saved := time.Local
	time.Local = time.FixedZone("UTC+5", 5*3600)
	defer func() { time.Local = saved }()
	sched, err := ParseSchedule("0 3 * * *")
	require.NoError(t, err)
	assert.Equal(t, utc("2026-12-07T03:00:00Z"), sched.Next(utc("2026-12-07T01:00:00Z")).UTC())
	assert.Equal(t, time.UTC, sched.Next(utc("2026-12-07T01:00:00Z")).Location())
}

// TestRunNames: a run is named {cluster}-{YYYYMMDDHHMMSS} of its due time in UTC, and the
// name reads back to that time; names that are not a run of that cluster do not.
func TestRunNames(t *testing.T) {
	due := time.Date(2026, 12, 7, 3, 4, 5, 0, time.FixedZone("UTC-2", -2*3600))
	assert.Equal(t, "my-cluster-20261207050405", RunName("my-cluster", due))
	got, ok := RunTime("my-cluster", RunName("my-cluster", due))
	require.True(t, ok)
	assert.True(t, got.Equal(due))
	assert.Equal(t, time.UTC, got.Location())

	for _, tc := range []struct{ cluster, name string }{
		{"my-cluster", "nightly"},                        // made by hand
		{"my-cluster", "my-cluster-2026120705040"},       // too short
		{"my-cluster", "my-cluster-20261307050405"},      // month 13
		{"my", "my-cluster-20261207050405"},              // another cluster's ("my-" then not a time)
		{"my-cluster", "other-20261207050405"},           // another cluster's
		{"my-cluster", "my-cluster-20261207050405-copy"}, // a copy by hand
	} {
		_, ok := RunTime(tc.cluster, tc.name)
		assert.False(t, ok, "%s of %s", tc.name, tc.cluster)
	}
}

// TestLatestDue: the latest due time after the last run and at or before now; none when the
// next is still ahead; a long gap gives one run (the latest), not one per missed time.
func TestLatestDue(t *testing.T) {
	for _, tc := range []struct {
		name, spec, after, now string
		want                   string // "" = none due
	}{
		{"daily, not yet", "@daily", "2026-12-07T00:00:00Z", "2026-12-07T23:59:59Z", ""},
		{"daily, due exactly now", "@daily", "2026-12-07T00:00:00Z", "2026-12-08T00:00:00Z", "2026-12-08T00:00:00Z"},
		{"daily, three missed: the latest only", "@daily", "2026-12-01T00:00:00Z", "2026-12-04T10:00:00Z", "2026-12-04T00:00:00Z"},
		{"five fields", "30 2 * * *", "2026-12-06T02:30:00Z", "2026-12-07T02:31:00Z", "2026-12-07T02:30:00Z"},
		{"every 15s from creation", "@every 15s", "2026-12-07T10:00:03Z", "2026-12-07T10:00:17Z", ""},
		{"every 15s, first due", "@every 15s", "2026-12-07T10:00:03Z", "2026-12-07T10:00:18Z", "2026-12-07T10:00:18Z"},
		{"every 15s, down a while", "@every 15s", "2026-12-07T10:00:03Z", "2026-12-07T11:00:00Z", "2026-12-07T10:59:48Z"},
		{"every minute, down over two years", "* * * * *", "2024-01-01T00:00:00Z", "2026-12-07T10:00:30Z", "2026-12-07T10:00:00Z"},
		{"every minute of January, looked at in December", "* * * 1 *", "2024-01-01T00:00:00Z", "2026-12-07T10:00:30Z", "2026-01-31T23:59:00Z"},
		{"leap days only", "0 0 29 2 *", "2020-03-01T00:00:00Z", "2026-12-07T10:00:00Z", "2024-02-29T00:00:00Z"},
		{"no base at all (zero time)", "@hourly", "0001-01-01T00:00:00Z", "2026-12-07T10:20:00Z", "2026-12-07T10:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sched, err := ParseSchedule(tc.spec)
			require.NoError(t, err)
			got, ok := LatestDue(sched, utc(tc.after), utc(tc.now))
			if tc.want == "" {
				assert.False(t, ok, "due %s", got)
				return
			}
			require.True(t, ok)
			assert.Equal(t, utc(tc.want), got)
		})
	}
}

// TestDecide: what the scheduler does for a cluster at a given moment, from its creation
// time, its state and the scheduled backups that exist.
func TestDecide(t *testing.T) {
	const cluster = "c"
	created := utc("2026-12-07T10:00:03Z")
	run := func(due, phase string) Run {
		return Run{Name: RunName(cluster, utc(due)), Due: utc(due), Phase: phase}
	}
	for _, tc := range []struct {
		name    string
		spec    string
		state   string
		runs    []Run
		now     string
		skipped string
		want    Decision
	}{
		{
			name: "first run from the creation time", spec: "@every 15s", state: views.StateActive,
			now:  "2026-12-07T10:00:19Z",
			want: Decision{Create: "c-20261207100018", Due: utc("2026-12-07T10:00:18Z"), Next: utc("2026-12-07T10:00:33Z")},
		},
		{
			name: "nothing due yet: back at the next due time", spec: "@every 15s", state: views.StateActive,
			now:  "2026-12-07T10:00:10Z",
			want: Decision{Next: utc("2026-12-07T10:00:18Z")},
		},
		{
			name: "the newest run's name is the base, whatever the order", spec: "@every 15s", state: views.StateActive,
			runs: []Run{run("2026-12-07T10:00:33Z", views.BackupCompleted), run("2026-12-07T10:00:18Z", views.BackupCompleted)},
			now:  "2026-12-07T10:00:40Z",
			want: Decision{Next: utc("2026-12-07T10:00:48Z")},
		},
		{
			name: "a restart after the run was made repeats nothing", spec: "@daily", state: views.StateActive,
			runs: []Run{run("2026-12-08T00:00:00Z", views.BackupRunning)},
			now:  "2026-12-08T00:00:07Z",
			want: Decision{Next: utc("2026-12-09T00:00:00Z")},
		},
		{
			name: "down for three days: one run, named after the latest due time", spec: "@daily", state: views.StateActive,
			runs: []Run{run("2026-12-05T00:00:00Z", views.BackupCompleted)},
			now:  "2026-12-08T09:00:00Z",
			want: Decision{Create: "c-20261208000000", Due: utc("2026-12-08T00:00:00Z"), Next: utc("2026-12-09T00:00:00Z")},
		},
		{
			name: "the previous run still Running: skipped", spec: "@every 15s", state: views.StateActive,
			runs: []Run{run("2026-12-07T10:00:18Z", views.BackupRunning)},
			now:  "2026-12-07T10:00:33Z",
			want: Decision{Due: utc("2026-12-07T10:00:33Z"), Skip: "the backup c-20261207100018 is still Running", SkippedFor: "c-20261207100018", Next: utc("2026-12-07T10:00:48Z")},
		},
		{
			name: "the previous run not yet picked up (no phase): skipped as Pending", spec: "@every 15s", state: views.StateActive,
			runs: []Run{run("2026-12-07T10:00:18Z", "")},
			now:  "2026-12-07T10:00:34Z",
			want: Decision{Due: utc("2026-12-07T10:00:33Z"), Skip: "the backup c-20261207100018 is still Pending", SkippedFor: "c-20261207100018", Next: utc("2026-12-07T10:00:48Z")},
		},
		{
			name: "a Failed previous run does not block the next", spec: "@every 15s", state: views.StateActive,
			runs: []Run{run("2026-12-07T10:00:18Z", views.BackupFailed)},
			now:  "2026-12-07T10:00:33Z",
			want: Decision{Create: "c-20261207100033", Due: utc("2026-12-07T10:00:33Z"), Next: utc("2026-12-07T10:00:48Z")},
		},
		{
			name: "the cluster not Active: skipped", spec: "@every 15s", state: views.StateCreating,
			now:  "2026-12-07T10:00:18Z",
			want: Decision{Due: utc("2026-12-07T10:00:18Z"), Skip: "cluster c is Creating, not Active", Next: utc("2026-12-07T10:00:33Z")},
		},
		{
			name: "a skipped run is not made later once the cluster is Active", spec: "@every 15s", state: views.StateActive,
			now: "2026-12-07T10:00:25Z", skipped: "2026-12-07T10:00:18Z",
			want: Decision{Next: utc("2026-12-07T10:00:33Z")},
		},
		{
			name: "the next due time after a skipped one is made", spec: "@every 15s", state: views.StateActive,
			now: "2026-12-07T10:00:33Z", skipped: "2026-12-07T10:00:18Z",
			want: Decision{Create: "c-20261207100033", Due: utc("2026-12-07T10:00:33Z"), Next: utc("2026-12-07T10:00:48Z")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sched, err := ParseSchedule(tc.spec)
			require.NoError(t, err)
			in := Inputs{Cluster: cluster, Created: created, State: tc.state, Runs: tc.runs, Now: utc(tc.now)}
			if tc.skipped != "" {
				in.Skipped = utc(tc.skipped)
			}
			assert.Equal(t, tc.want, Decide(sched, in))
		})
	}
}

// TestToPrune: keep retains the newest keep Completed scheduled backups; older Completed
// ones go, oldest first; a Failed one goes once keep newer ones completed; Pending and
// Running ones stay.
func TestToPrune(t *testing.T) {
	r := func(minute int, phase string) Run {
		due := time.Date(2026, 12, 7, 10, minute, 0, 0, time.UTC)
		return Run{Name: RunName("c", due), Due: due, Phase: phase}
	}
	names := func(runs []Run) []string {
		out := []string{}
		for _, x := range runs {
			out = append(out, x.Name)
		}
		return out
	}
	C, F, R, P := views.BackupCompleted, views.BackupFailed, views.BackupRunning, views.BackupPending
	for _, tc := range []struct {
		name string
		runs []Run
		keep int
		want []Run
	}{
		{"none yet", nil, 2, nil},
		{"exactly keep", []Run{r(1, C), r(2, C)}, 2, nil},
		{"one beyond keep", []Run{r(1, C), r(2, C), r(3, C)}, 2, []Run{r(1, C)}},
		{"oldest first, any input order", []Run{r(5, C), r(1, C), r(4, C), r(2, C), r(3, C)}, 2, []Run{r(1, C), r(2, C), r(3, C)}},
		{"running ones are not counted nor pruned", []Run{r(1, C), r(2, C), r(3, R), r(4, P)}, 2, nil},
		{"a Failed one stays until keep newer completed", []Run{r(1, C), r(2, F), r(3, C)}, 2, nil},
		{"a Failed one goes once keep newer completed", []Run{r(1, C), r(2, F), r(3, C), r(4, C)}, 2, []Run{r(1, C), r(2, F)}},
		{"a Failed one newer than the kept ones stays", []Run{r(1, C), r(2, C), r(3, F)}, 2, nil},
		{"keep 1", []Run{r(1, C), r(2, F), r(3, C)}, 1, []Run{r(1, C), r(2, F)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, names(tc.want), names(ToPrune(tc.runs, tc.keep)))
		})
	}
}
