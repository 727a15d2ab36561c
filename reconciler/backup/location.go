// Opening a backup's location and reading its manifest: shared by the ValkeyBackup
// controller and by a cluster restoring from a backup (reconciler/restore.go).

package backup

import (
	"context"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gomomento/valkey-operator/objectstore"
	"github.com/gomomento/valkey-operator/reconciler/views"
)

// OpenStore builds the object store client of a storage spec from its Secrets in namespace,
// read through reader (the API itself: the operator does not cache users' Secrets). A missing
// Secret or key, or a malformed endpoint or CA, is the user's to fix and comes back as msg;
// err is an API failure.
func OpenStore(ctx context.Context, reader client.Reader, namespace string, s views.BackupStorage) (store *objectstore.Store, msg string, err error) {
	creds, msg, err := SecretKeys(ctx, reader, namespace, s.CredentialsSecret.Name, "accessKey", "secretKey")
	if err != nil || msg != "" {
		return nil, msg, err
	}
	loc := objectstore.Location{Endpoint: s.Endpoint, Bucket: s.Bucket, Prefix: s.Prefix, Region: s.Region,
		AccessKey: string(creds["accessKey"]), SecretKey: string(creds["secretKey"])}
	if s.CASecret.Name != "" {
		ca, msg, err := SecretKeys(ctx, reader, namespace, s.CASecret.Name, "ca.crt")
		if err != nil || msg != "" {
			return nil, msg, err
		}
		loc.CA = ca["ca.crt"]
	}
	store, err = objectstore.Open(loc)
	if err != nil {
		return nil, "object storage: " + err.Error(), nil
	}
	return store, "", nil
}

// SecretKeys reads a user's Secret and checks it holds keys; a missing Secret or key is msg.
func SecretKeys(ctx context.Context, reader client.Reader, namespace, name string, keys ...string) (map[string][]byte, string, error) {
	s := &corev1.Secret{}
	if err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("Secret %q not found in namespace %s", name, namespace), nil
		}
		return nil, "", err
	}
	for _, k := range keys {
		if len(s.Data[k]) == 0 {
			return nil, fmt.Sprintf("Secret %q has no key %q", name, k), nil
		}
	}
	return s.Data, "", nil
}

// manifestLimit bounds the manifest read: a few hundred bytes per shard.
const manifestLimit = 4 << 20

// LoadManifest reads and decodes the manifest of the backup at path (under the store's
// prefix: {namespace}/{cluster}/{backup}), then checks that every object it names is in the
// store at its recorded size. Any problem a user can see and fix (no manifest there, a format
// this operator does not read, an object missing or of another size, the store refusing) is
// returned as an error whose text names it; objectstore's typed errors stay wrapped in it.
func LoadManifest(ctx context.Context, store *objectstore.Store, path string) (Manifest, error) {
	key := store.Key(path, ManifestName)
	r, _, err := store.Get(ctx, key)
	if err != nil {
		if errors.Is(err, objectstore.ErrNotFound) {
			return Manifest{}, fmt.Errorf("no backup at %s: %s not found (a backup without its manifest is incomplete)", path, key)
		}
		return Manifest{}, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, manifestLimit))
	if err != nil {
		return Manifest{}, fmt.Errorf("reading %s: %w", key, err)
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", key, err)
	}
	for _, s := range m.Shards {
		size, err := store.Stat(ctx, s.Object)
		switch {
		case errors.Is(err, objectstore.ErrNotFound):
			return Manifest{}, fmt.Errorf("shard %d: object %s named by the manifest is missing", s.Index, s.Object)
		case err != nil:
			return Manifest{}, err
		case size != s.Bytes:
			return Manifest{}, fmt.Errorf("shard %d: object %s is %d bytes, the manifest says %d", s.Index, s.Object, size, s.Bytes)
		}
	}
	return m, nil
}
