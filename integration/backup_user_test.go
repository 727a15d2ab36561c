//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/gomomento/valkey-operator/valkeyops/snapshot"
)

// TestBackupUserFromRenderedACL: servers started on the ACL file the operator renders for
// every cluster (model.RenderACL), caught mid-rotation of the operator password, hold the
// backup user exactly as rendered (no drift, so no live write on an idle cluster) and let
// it stream a replica's snapshot with either password derived from the operator's
// (model.BackupPassword): the stream carries every key. Logged in with that password nothing
// else is allowed: GET, SCAN, CONFIG, ACL and PSYNC are refused NOPERM. Once the rotation
// retires the previous password (applied live, as the operator does), it is refused and the
// current one still streams.
func TestBackupUserFromRenderedACL(t *testing.T) {
	const keys = 500
	const next = "next-operator-secret"
	for _, img := range rotationImages {
		t.Run(img.name, func(t *testing.T) {
			t.Parallel()
			spec := aclSpec()
			spec.ReplicationSyncsSlots = img.image == harness.Image9()
			rotating := spec
			rotating.OperatorExtraHashes = []string{model.HashPassword(next)}
			rotating.ReplicationExtraHashes = []string{model.HashPassword(model.ReplicationPassword(next))}
			rotating.ExporterExtraHashes = []string{model.HashPassword(model.ExporterPassword(next))}
			rotating.BackupExtraHashes = []string{model.HashPassword(model.BackupPassword(next))}
			f := newFixture(t, harness.Config{Image: img.image, ACL: rotating}, 1, 2, valkeyops.Options{})
			ctx := ctxT(t, 3*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 1))
			snap := waitHealthy(t, f, f.nodes, 1, 1, 30*time.Second)
			replica := snap.ReplicasOf(snap.Primaries()[0].ID)[0].Node
			fill(t, dataClient(t, f.nodes), "bk:", keys)

			for _, st := range readAuth(t, f.admin, f.nodes) {
				assert.Empty(t, model.ACLDrift(rotating, st.Users), "%s holds the rendered file", st.Node.Name)
				assert.Equal(t, rotating.Expected()[model.BackupUser], st.Users[model.BackupUser], "%s: the backup user as rendered", st.Node.Name)
			}

			stream := func(password string) (snapshot.Result, error) {
				creds := valkeyops.Credentials{Username: model.BackupUser, Password: password}
				return snapshot.Stream(ctx, replica, io.Discard, snapshot.Options{Credentials: creds})
			}
			// The replica holds every key once replication caught up.
			require.NoError(t, poll.Until(ctx, 200*time.Millisecond, 30*time.Second, "a snapshot of the replica with every key, as backup", func(context.Context) (bool, string, error) {
				res, err := stream(model.BackupPassword(operatorPassword))
				if err != nil {
					return false, err.Error(), nil
				}
				return res.Header.KeysKnown && res.Header.Keys == keys, fmt.Sprintf("%d keys in the snapshot", res.Header.Keys), nil
			}))
			for _, op := range []string{operatorPassword, next} {
				res, err := stream(model.BackupPassword(op))
				require.NoError(t, err, "mid-rotation: the password derived from either operator password streams")
				assert.Positive(t, res.Bytes)
				assert.Equal(t, int64(keys), res.Header.Keys)
			}

			backup := userClient(t, replica, model.BackupUser, model.BackupPassword(operatorPassword), nil)
			for _, cmd := range [][]string{
				{"GET", "bk:1"}, {"SCAN", "0"}, {"CONFIG", "GET", "masterauth"}, {"ACL", "LIST"}, {"PSYNC", "?", "-1"},
			} {
				err := backup.Do(ctx, backup.B().Arbitrary(cmd...).Build()).Error()
				var verr *valkey.ValkeyError
				if assert.True(t, errors.As(err, &verr), "%v is refused by the server: %v", cmd, err) {
					assert.True(t, strings.HasPrefix(verr.Error(), "NOPERM"), "%v: %v", cmd, verr)
				}
			}

			// The rotation's last pass: only the current password's hashes stay.
			require.NoError(t, f.admin.ApplyACL(ctx, f.nodes, spec))
			_, err := stream(model.BackupPassword(next))
			var reply *snapshot.ReplyError
			require.ErrorAs(t, err, &reply, "the retired password no longer logs in")
			assert.Equal(t, "WRONGPASS", reply.Code())
			res, err := stream(model.BackupPassword(operatorPassword))
			require.NoError(t, err)
			assert.Equal(t, int64(keys), res.Header.Keys)
		})
	}
}
