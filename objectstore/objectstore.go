// Package objectstore is the operator's one way to S3-compatible object storage: a backup's
// location as a ValkeyBackup or ValkeyCluster names it (endpoint, bucket, prefix, region), the
// credentials from its Secret, and the few operations a backup and a restore need, through
// minio-go. Errors are typed (ErrUnreachable, ErrCredentials, ErrNoBucket, ErrNotFound) so
// callers decide without matching text, and no error or log line carries a credential.
package objectstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// PartSize is the multipart part of an upload of unknown size: minio-go buffers one part per
// upload, so this is the memory a transfer holds whatever the data's size. With S3's limit of
// 10,000 parts it caps one object at about 156 GiB.
const PartSize = 16 << 20

// Location is where a backup lives and how to log in there.
type Location struct {
	// Endpoint is the store's URL: scheme, host and optional port (the schema refuses more).
	Endpoint string
	Bucket   string
	// Prefix is prepended to every key, without leading or trailing '/'; may be empty.
	Prefix string
	Region string
	// AccessKey and SecretKey are the Secret's accessKey and secretKey.
	AccessKey, SecretKey string
	// CA is a PEM bundle to trust for an https endpoint instead of the system roots; nil for
	// none.
	CA []byte
}

// Typed failures, wrapped with the endpoint and bucket (never a credential).
var (
	// ErrUnreachable: no answer from the endpoint (DNS, connection refused, timeout, TLS).
	ErrUnreachable = errors.New("object store unreachable")
	// ErrCredentials: the store refused the access key or the signature.
	ErrCredentials = errors.New("object store refused the credentials")
	// ErrNoBucket: the bucket does not exist.
	ErrNoBucket = errors.New("bucket does not exist")
	// ErrNotFound: no object under that key.
	ErrNotFound = errors.New("object not found")
)

// Store is one Location opened.
type Store struct {
	loc Location
	c   *minio.Client
}

// Open makes a client for loc; it does not talk to the store (Check does).
func Open(loc Location) (*Store, error) {
	u, err := url.Parse(loc.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("object store endpoint %q is not an http(s) URL", loc.Endpoint)
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: time.Minute,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	if len(loc.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(loc.CA) {
			return nil, errors.New("object store CA: no PEM certificate in ca.crt")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:     credentials.NewStaticV4(loc.AccessKey, loc.SecretKey, ""),
		Secure:    u.Scheme == "https",
		Region:    loc.Region,
		Transport: tr,
		// One try per call: the backup controller decides what to retry, and a refused
		// credential must not be hammered.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", loc.Endpoint, err)
	}
	return &Store{loc: loc, c: c}, nil
}

// Key is the full object key of name under the location's prefix; parts are joined with '/'.
func (s *Store) Key(parts ...string) string {
	return path.Join(append([]string{s.loc.Prefix}, parts...)...)
}

// Check asks the store whether the bucket exists, with the location's credentials: the first
// call of a backup or a restore, before any server is touched.
func (s *Store) Check(ctx context.Context) error {
	ok, err := s.c.BucketExists(ctx, s.loc.Bucket)
	if err != nil {
		return s.wrap("check bucket", "", err)
	}
	if !ok {
		return s.wrap("check bucket", "", ErrNoBucket)
	}
	return nil
}

// Put uploads r, of unknown size, as key in PartSize parts, and returns the bytes stored. An
// upload that fails leaves no object under key (S3 completes a multipart upload only at the
// end); AbortIncomplete removes its parts.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	info, err := s.c.PutObject(ctx, s.loc.Bucket, key, r, -1, minio.PutObjectOptions{
		PartSize: PartSize, ContentType: "application/octet-stream",
	})
	if err != nil {
		return 0, s.wrap("put", key, err)
	}
	return info.Size, nil
}

// PutSmall uploads b as key in one request (a manifest).
func (s *Store) PutSmall(ctx context.Context, key string, b []byte, contentType string) error {
	_, err := s.c.PutObject(ctx, s.loc.Bucket, key, strings.NewReader(string(b)), int64(len(b)), minio.PutObjectOptions{ContentType: contentType})
	return s.wrap("put", key, err)
}

// Get opens key for reading; the caller closes it. A missing key is ErrNotFound, found at
// once rather than at the first read.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	o, err := s.c.GetObject(ctx, s.loc.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, 0, s.wrap("get", key, err)
	}
	st, err := o.Stat()
	if err != nil {
		o.Close()
		return nil, 0, s.wrap("get", key, err)
	}
	return o, st.Size, nil
}

// Stat is the size of key.
func (s *Store) Stat(ctx context.Context, key string) (int64, error) {
	st, err := s.c.StatObject(ctx, s.loc.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return 0, s.wrap("stat", key, err)
	}
	return st.Size, nil
}

// List is the keys under prefix (a full key prefix, from Key), recursively, in key order.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for o := range s.c.ListObjects(ctx, s.loc.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, s.wrap("list", prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys, nil
}

// Delete removes key; a key already gone is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	return s.wrap("delete", key, s.c.RemoveObject(ctx, s.loc.Bucket, key, minio.RemoveObjectOptions{}))
}

// Incomplete is the keys of unfinished multipart uploads under prefix.
func (s *Store) Incomplete(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for u := range s.c.ListIncompleteUploads(ctx, s.loc.Bucket, prefix, true) {
		if u.Err != nil {
			return nil, s.wrap("list uploads", prefix, u.Err)
		}
		keys = append(keys, u.Key)
	}
	return keys, nil
}

// AbortIncomplete aborts every unfinished multipart upload under prefix: a transfer cut
// where it could not abort its own (its context cancelled, its process killed), so its parts
// do not linger in the bucket.
func (s *Store) AbortIncomplete(ctx context.Context, prefix string) error {
	keys, err := s.Incomplete(ctx, prefix)
	if err != nil {
		return err
	}
	for _, key := range keys {
		if err := s.c.RemoveIncompleteUpload(ctx, s.loc.Bucket, key); err != nil {
			return s.wrap("abort upload", key, err)
		}
	}
	return nil
}

// AbortIncompleteSettled is AbortIncomplete repeated until no upload under prefix has been
// open for quiet. A part upload still in flight when its upload is aborted may land after
// the abort and open the upload again (S3 documents that an abort may have to be repeated;
// SeaweedFS does it when the client that sent the part was killed), so where a transfer was
// just cut, one pass is not enough to leave nothing behind. It gives up when ctx ends.
func (s *Store) AbortIncompleteSettled(ctx context.Context, prefix string, quiet time.Duration) error {
	const every = 250 * time.Millisecond
	clearSince := time.Time{}
	for {
		keys, err := s.Incomplete(ctx, prefix)
		if err != nil {
			return err
		}
		switch {
		case len(keys) > 0:
			clearSince = time.Time{}
			if err := s.AbortIncomplete(ctx, prefix); err != nil {
				return err
			}
		case clearSince.IsZero():
			clearSince = time.Now()
		case time.Since(clearSince) >= quiet:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// wrap names the operation, endpoint, bucket and key of err and classifies it; nil stays nil.
func (s *Store) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	where := fmt.Sprintf("%s %s bucket %q", op, s.loc.Endpoint, s.loc.Bucket)
	if key != "" {
		where += fmt.Sprintf(" key %q", key)
	}
	if kind := classify(err); kind != nil && !errors.Is(err, kind) {
		return fmt.Errorf("%s: %w: %v", where, kind, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// classify maps a store or transport error to its typed failure, nil when it is none of them.
func classify(err error) error {
	if errors.Is(err, ErrNoBucket) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrCredentials) || errors.Is(err, ErrUnreachable) {
		return nil
	}
	switch minio.ToErrorResponse(err).Code {
	case "NoSuchBucket":
		return ErrNoBucket
	case "NoSuchKey", "NoSuchUpload":
		return ErrNotFound
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken":
		return ErrCredentials
	}
	var netErr net.Error
	var opErr *net.OpError
	var urlErr *url.Error
	if errors.As(err, &opErr) || errors.As(err, &netErr) || errors.As(err, &urlErr) {
		return ErrUnreachable
	}
	return nil
}
