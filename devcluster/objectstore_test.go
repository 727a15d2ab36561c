//go:build envtest

package devcluster_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gomomento/valkey-operator/devcluster"
	"github.com/gomomento/valkey-operator/devcluster/devtest"
	"github.com/gomomento/valkey-operator/devcluster/objectstore"
	"github.com/gomomento/valkey-operator/devcluster/testimage"
)

// TestDevClusterObjectStore checks that every dev cluster comes with its object store: the
// endpoint on the pods' network gateway, the access file, and a pod that fetches an object
// the host wrote (through a presigned URL: the store checks the signature) while an
// unsigned request from the same pod is refused.
func TestDevClusterObjectStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The hash-named tag: devpod's GET is there whatever another checkout did to :test.
	image, err := testimage.Ensure(ctx)
	require.NoError(t, err)
	env := devtest.Start(t, devtest.Options{Nodes: 1})
	store, err := env.ObjectStore(ctx)
	require.NoError(t, err)

	t.Run("endpoint on the network gateway, access file written", func(t *testing.T) {
		u, err := url.Parse(store.Endpoint)
		require.NoError(t, err)
		assert.Equal(t, env.Cluster.Network.Gateway.String(), u.Hostname())
		assert.Equal(t, fmt.Sprint(env.Cluster.Options.ObjectStorePort), u.Port())

		path := devcluster.ObjectStoreEnvFile(env.Cluster.Options.StateDir)
		st, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		fromFile, err := objectstore.ReadEnvFile(path)
		require.NoError(t, err)
		assert.Equal(t, store, fromFile)
	})

	cl, err := store.Client()
	require.NoError(t, err)
	body := "written from the host\n"
	_, err = cl.PutObject(ctx, store.Bucket, "from-host.txt", strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
	require.NoError(t, err)

	require.NoError(t, env.WaitSchedulable(ctx, 60*time.Second))
	_, err = env.Kube.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "s3client"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: image, Args: []string{"serve", "--port", "7000"},
			// Ready once devpod listens: the test talks to it as soon as it is Ready.
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(7000)}}},
		}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	ip := waitRunningReady(ctx, t, env.Kube, "default", "s3client")

	t.Run("a pod reads an object the host wrote", func(t *testing.T) {
		signed, err := cl.PresignedGetObject(ctx, store.Bucket, "from-host.txt", 5*time.Minute, nil)
		require.NoError(t, err)
		got, err := askFor(ip, "GET "+signed.String(), 15*time.Second)
		require.NoError(t, err)
		assert.Equal(t, body, got)
	})

	t.Run("an unsigned request from a pod is refused", func(t *testing.T) {
		got, err := askFor(ip, "GET "+store.Endpoint+"/"+store.Bucket+"/from-host.txt", 15*time.Second)
		require.NoError(t, err)
		assert.Equal(t, "ERR 403 Forbidden", got)
	})
}

// askFor is ask with a longer deadline, for requests the pod forwards over the network.
func askFor(ip, req string, within time.Duration) (string, error) {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "7000"), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(within))
	if _, err := fmt.Fprintln(conn, req); err != nil {
		return "", err
	}
	b, err := io.ReadAll(bufio.NewReader(conn))
	return string(b), err
}
