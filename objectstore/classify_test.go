package objectstore

import (
	"errors"
	"net"
	"net/url"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWrapClassifiesAndHidesNothingSecret: each store answer or transport failure gets its
// typed error, the message names the operation, endpoint, bucket and key, and a plain
// failure stays untyped.
func TestWrapClassifiesAndHidesNothingSecret(t *testing.T) {
	s, err := Open(Location{Endpoint: "https://objects.example:9000", Bucket: "backups", AccessKey: "AK", SecretKey: "very-secret"})
	require.NoError(t, err)
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"no such bucket", minio.ErrorResponse{Code: "NoSuchBucket", StatusCode: 404}, ErrNoBucket},
		{"no such key", minio.ErrorResponse{Code: "NoSuchKey", StatusCode: 404}, ErrNotFound},
		{"unknown access key", minio.ErrorResponse{Code: "InvalidAccessKeyId", StatusCode: 403}, ErrCredentials},
		{"bad signature", minio.ErrorResponse{Code: "SignatureDoesNotMatch", StatusCode: 403}, ErrCredentials},
		{"access denied", minio.ErrorResponse{Code: "AccessDenied", StatusCode: 403}, ErrCredentials},
		{"connection refused", &url.Error{Op: "Head", URL: "https://objects.example:9000/backups/", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}, ErrUnreachable},
		{"already typed", ErrNoBucket, ErrNoBucket},
		{"anything else", minio.ErrorResponse{Code: "InternalError", StatusCode: 500}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := s.wrap("put", "valkey/x/shard-0.rdb", tc.err)
			require.Error(t, got)
			for _, typed := range []error{ErrNoBucket, ErrNotFound, ErrCredentials, ErrUnreachable} {
				assert.Equal(t, typed == tc.want, errors.Is(got, typed), "errors.Is(%v)", typed)
			}
			assert.Contains(t, got.Error(), `put https://objects.example:9000 bucket "backups" key "valkey/x/shard-0.rdb"`)
			assert.NotContains(t, got.Error(), "very-secret")
		})
	}
	assert.NoError(t, s.wrap("put", "k", nil))
}

func TestOpenRefusesWhatIsNotAnEndpoint(t *testing.T) {
	for _, endpoint := range []string{"", "objects.example:9000", "ftp://objects.example", "https://"} {
		_, err := Open(Location{Endpoint: endpoint, Bucket: "b"})
		assert.Error(t, err, endpoint)
	}
	_, err := Open(Location{Endpoint: "https://objects.example", Bucket: "b", CA: []byte("not a certificate")})
	assert.ErrorContains(t, err, "no PEM certificate")
}
