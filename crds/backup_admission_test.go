//go:build envtest

package crds_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gomomento/valkey-operator/crds"
)

// validStorage is an S3 location every schema copy accepts; the cases below change one
// field of it at a time.
const validStorage = `{"endpoint":"http://10.0.0.5:8333","bucket":"valkey-backups","prefix":"dev","credentialsSecretRef":{"name":"object-store"}}`

// admissionCase is one object created (as a server-side dry run) on the real API server:
// want "" means admitted, otherwise the refusal must contain want.
type admissionCase struct {
	name, kind, spec, want string
	// check, when set, inspects an admitted object as the API server returned it (defaults
	// applied).
	check func(t *testing.T, got *unstructured.Unstructured)
}

// backupAdmissionCases: what ValkeyBackup and ValkeyCluster's spec.backup and
// spec.restoreFrom admit and refuse, each refusal with the message a user reads.
func backupAdmissionCases() []admissionCase {
	backup := func(storage string) string { return `{"cluster":"my-cluster","storage":` + storage + `}` }
	// storageWith is validStorage with one field replaced ("" removes it).
	storageWith := func(field, value string) string {
		fields := map[string]string{
			"endpoint": `"http://10.0.0.5:8333"`, "bucket": `"valkey-backups"`, "prefix": `"dev"`,
			"credentialsSecretRef": `{"name":"object-store"}`,
		}
		if value == "" {
			delete(fields, field)
		} else {
			fields[field] = value
		}
		var parts []string
		for _, k := range []string{"endpoint", "bucket", "prefix", "region", "credentialsSecretRef", "caSecretRef"} {
			if v, ok := fields[k]; ok {
				parts = append(parts, fmt.Sprintf("%q:%s", k, v))
			}
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	cluster := func(extra string) string { return `{"configRef":"standard","shards":3,` + extra + `}` }
	schedule := func(s string) string {
		return cluster(fmt.Sprintf(`"backup":{"schedule":%q,"storage":%s}`, s, validStorage))
	}

	const (
		endpointScheme = "endpoint must be an http:// or https:// URL"
		endpointOnly   = "endpoint is the server's URL only: a scheme, a host and an optional port"
		bucketName     = "bucket must be an S3 bucket name: 3 to 63 lowercase letters, digits, '.' and '-'"
		bucketShape    = "bucket must be an S3 bucket name: no two '.' in a row, and not shaped like an IP address"
		secretName     = "name must be a Secret name"
		scheduleShape  = "schedule must be five cron fields separated by spaces"
		scheduleDesc   = "schedule descriptors are @every <duration>"
		scheduleField  = "schedule has a cron field out of range or malformed"
		oneSource      = "restoreFrom names exactly one source"
		together       = "restoreFrom.storage and restoreFrom.path go together"
	)
	cases := []admissionCase{
		{name: "backup: valid", kind: crds.KindBackup, spec: backup(validStorage)},
		{name: "backup: every storage field", kind: crds.KindBackup, spec: backup(
			`{"endpoint":"https://s3.eu-west-1.amazonaws.com","bucket":"my.backups-1","prefix":"valkey/prod","region":"eu-west-1",` +
				`"credentialsSecretRef":{"name":"s3-creds"},"caSecretRef":{"name":"private-ca.v1"}}`)},
		{name: "backup: missing cluster", kind: crds.KindBackup, spec: `{"storage":` + validStorage + `}`, want: "spec.cluster: Required value"},
		{name: "backup: missing storage", kind: crds.KindBackup, spec: `{"cluster":"my-cluster"}`, want: "spec.storage: Required value"},
		{name: "backup: cluster name with a dot", kind: crds.KindBackup, spec: `{"cluster":"my.cluster","storage":` + validStorage + `}`,
			want: "cluster must be the name of a ValkeyCluster"},
		{name: "backup: missing credentials", kind: crds.KindBackup, spec: backup(storageWith("credentialsSecretRef", "")),
			want: "spec.storage.credentialsSecretRef: Required value"},
		{name: "backup: missing bucket", kind: crds.KindBackup, spec: backup(storageWith("bucket", "")), want: "spec.storage.bucket: Required value"},
		{name: "backup: no prefix", kind: crds.KindBackup, spec: backup(storageWith("prefix", ""))},
	}
	for _, e := range []struct{ endpoint, want string }{
		{"https://s3.eu-west-1.amazonaws.com", ""},
		{"http://10.0.0.5:8333", ""},
		{"http://objectstore.storage.svc:8333/", ""},
		{"http://[fd00::5]:9000", ""},
		{"s3.amazonaws.com", endpointScheme},
		{"ftp://files.example.com", endpointScheme},
		{"HTTP://s3.example.com", endpointScheme},
		{"http://10.0.0.5:8333/valkey-backups", endpointOnly},
		{"http://key:secret@10.0.0.5:8333", endpointOnly},
		{"https://s3.example.com?region=eu", endpointOnly},
		{"http://", endpointOnly},
		{"http://bad host", endpointOnly},
	} {
		cases = append(cases, admissionCase{name: "endpoint " + e.endpoint, kind: crds.KindBackup,
			spec: backup(storageWith("endpoint", fmt.Sprintf("%q", e.endpoint))), want: e.want})
	}
	for _, b := range []struct{ bucket, want string }{
		{"abc", ""},
		{"valkey.backups-2026", ""},
		{strings.Repeat("a", 63), ""},
		{"ab", bucketName},
		{"My_Bucket", bucketName},
		{"-backups", bucketName},
		{"backups.", bucketName},
		{"a..b", bucketShape},
		{"192.168.1.10", bucketShape},
		{strings.Repeat("a", 64), "spec.storage.bucket: Too long"},
	} {
		cases = append(cases, admissionCase{name: "bucket " + b.bucket, kind: crds.KindBackup,
			spec: backup(storageWith("bucket", fmt.Sprintf("%q", b.bucket))), want: b.want})
	}
	for _, p := range []struct{ prefix, want string }{
		{"valkey/prod", ""},
		{"team-a", ""},
		{"/valkey", "prefix must not start with '/'"},
		{"valkey/", "prefix must not end with '/' or contain '//'"},
		{"valkey//prod", "prefix must not end with '/' or contain '//'"},
		{"valkey\nprod", "prefix cannot contain control characters"},
	} {
		cases = append(cases, admissionCase{name: fmt.Sprintf("prefix %q", p.prefix), kind: crds.KindBackup,
			spec: backup(storageWith("prefix", fmt.Sprintf("%q", p.prefix))), want: p.want})
	}
	cases = append(cases,
		admissionCase{name: "credentials Secret name with an underscore", kind: crds.KindBackup,
			spec: backup(storageWith("credentialsSecretRef", `{"name":"Object_Store"}`)), want: secretName},
		admissionCase{name: "credentials Secret without a name", kind: crds.KindBackup,
			spec: backup(storageWith("credentialsSecretRef", `{}`)), want: "spec.storage.credentialsSecretRef.name: Required value"},
		admissionCase{name: "CA Secret name with a slash", kind: crds.KindBackup,
			spec: backup(storageWith("caSecretRef", `{"name":"ns/ca"}`)), want: secretName},
		admissionCase{name: "region with a space", kind: crds.KindBackup,
			spec: backup(storageWith("region", `"eu west"`)), want: "region holds letters, digits"},

		// ValkeyCluster spec.backup: the same storage schema, whatever its path.
		admissionCase{name: "cluster: a schedule, keep and suspend defaulted", kind: crds.KindCluster, spec: schedule("0 3 * * *"),
			check: func(t *testing.T, got *unstructured.Unstructured) {
				keep, _, _ := unstructured.NestedInt64(got.Object, "spec", "backup", "keep")
				assert.Equal(t, int64(7), keep, "keep defaults to 7")
				suspend, found, _ := unstructured.NestedBool(got.Object, "spec", "backup", "suspend")
				assert.True(t, found, "suspend defaulted")
				assert.False(t, suspend)
			}},
		admissionCase{name: "cluster: keep 0", kind: crds.KindCluster,
			spec: cluster(`"backup":{"schedule":"@daily","keep":0,"storage":` + validStorage + `}`), want: "spec.backup.keep: Invalid value: 0"},
		admissionCase{name: "cluster: keep 2 and suspended", kind: crds.KindCluster,
			spec: cluster(`"backup":{"schedule":"@daily","keep":2,"suspend":true,"storage":` + validStorage + `}`)},
		admissionCase{name: "cluster: backup without storage", kind: crds.KindCluster,
			spec: cluster(`"backup":{"schedule":"@daily"}`), want: "spec.backup.storage: Required value"},
		admissionCase{name: "cluster: backup without schedule", kind: crds.KindCluster,
			spec: cluster(`"backup":{"storage":` + validStorage + `}`), want: "spec.backup.schedule: Required value"},
		admissionCase{name: "cluster: backup storage with a bad endpoint", kind: crds.KindCluster,
			spec: cluster(`"backup":{"schedule":"@daily","storage":` + storageWith("endpoint", `"s3.amazonaws.com"`) + `}`), want: "spec.backup.storage.endpoint: Invalid value: \"s3.amazonaws.com\": " + endpointScheme},
		admissionCase{name: "cluster: acl user named backup", kind: crds.KindCluster,
			spec: cluster(`"acl":[{"username":"backup","passwordHashes":["` + strings.Repeat("a", 64) + `"],"permissions":[{"roleRef":"r"}]}]`),
			want: "acl username 'backup' is reserved for the operator"},

		// ValkeyCluster spec.restoreFrom: exactly one source.
		admissionCase{name: "restore: from a ValkeyBackup", kind: crds.KindCluster, spec: cluster(`"restoreFrom":{"backup":"my-cluster-20261207030000"}`)},
		admissionCase{name: "restore: from storage and path", kind: crds.KindCluster,
			spec: cluster(`"restoreFrom":{"storage":` + validStorage + `,"path":"prod/my-cluster/my-cluster-20261207030000"}`)},
		admissionCase{name: "restore: both sources", kind: crds.KindCluster,
			spec: cluster(`"restoreFrom":{"backup":"b","storage":` + validStorage + `,"path":"p/c/b"}`), want: oneSource},
		admissionCase{name: "restore: neither source", kind: crds.KindCluster, spec: cluster(`"restoreFrom":{}`), want: oneSource},
		admissionCase{name: "restore: storage without path", kind: crds.KindCluster,
			spec: cluster(`"restoreFrom":{"storage":` + validStorage + `}`), want: together},
		admissionCase{name: "restore: path without storage", kind: crds.KindCluster,
			spec: cluster(`"restoreFrom":{"backup":"b","path":"p/c/b"}`), want: together},
		admissionCase{name: "restore: path with a leading slash", kind: crds.KindCluster,
			spec: cluster(`"restoreFrom":{"storage":` + validStorage + `,"path":"/p/c/b"}`), want: "path is a key prefix"},
		admissionCase{name: "restore: storage with a bad bucket", kind: crds.KindCluster,
			spec: cluster(`"restoreFrom":{"storage":` + storageWith("bucket", `"Bad_Bucket"`) + `,"path":"p/c/b"}`),
			want: "spec.restoreFrom.storage.bucket: Invalid value: \"Bad_Bucket\": " + bucketName},
		admissionCase{name: "restore: backup name with an uppercase letter", kind: crds.KindCluster,
			spec: cluster(`"restoreFrom":{"backup":"Nightly"}`), want: "backup must be the name of a ValkeyBackup"},
	)
	for _, s := range []struct{ schedule, want string }{
		{"0 3 * * *", ""},
		{"*/15 * * * *", ""},
		{"0 */6 * * *", ""},
		{"30 2 * * MON-FRI", ""},
		{"0 0 1 JAN,jul *", ""},
		{"5,35 8-18/2 * * 1-5", ""},
		{"0 0 1-7 * sun", ""},
		{"59 23 31 12 6", ""},
		{"0 0 ? * *", ""},
		{"  0 3  * * *  ", ""},
		{"@every 1h30m", ""},
		{"@every 90s", ""},
		{"@every 1.5h", ""},
		{"@hourly", ""},
		{"@daily", ""},
		{"@midnight", ""},
		{"@weekly", ""},
		{"@monthly", ""},
		{"@yearly", ""},
		{"@annually", ""},
		{"", scheduleShape},
		{"0 3 * *", scheduleShape},
		{"0 3 * * * *", scheduleShape},
		{"TZ=Europe/Paris 0 3 * * *", scheduleShape},
		{"0\t3 * * *", scheduleShape},
		{"60 * * * *", scheduleField},
		{"0 24 * * *", scheduleField},
		{"0 0 0 * *", scheduleField},
		{"0 0 32 * *", scheduleField},
		{"0 0 * 13 *", scheduleField},
		{"0 0 * * 7", scheduleField},
		{"0 0 * * MONDAY", scheduleField},
		{"*/0 * * * *", scheduleField},
		{"0 3 * * 1-", scheduleField},
		{"0,,3 * * * *", scheduleField},
		{"@fortnightly", scheduleDesc},
		{"@every", scheduleDesc},
		{"@every 1d", scheduleDesc},
		{"@every -1h", scheduleDesc},
		{"@daily 0 3 * * *", scheduleDesc},
	} {
		cases = append(cases, admissionCase{name: fmt.Sprintf("schedule %q", s.schedule), kind: crds.KindCluster,
			spec: schedule(s.schedule), want: s.want})
	}
	return cases
}
