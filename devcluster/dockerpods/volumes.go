package dockerpods

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gomomento/valkey-operator/devcluster/atomicdir"
	"github.com/gomomento/valkey-operator/devcluster/podenv"
)

// lookup reads ConfigMaps and Secrets from the informer caches, falling back
// to the API server for objects created moments ago.
type lookup struct {
	ctx context.Context
	p   *Provider
}

func (p *Provider) lookup(ctx context.Context) lookup { return lookup{ctx: ctx, p: p} }

func (l lookup) ConfigMap(ns, name string) (*corev1.ConfigMap, error) {
	if cm, err := l.p.cms.ConfigMaps(ns).Get(name); err == nil {
		return cm, nil
	}
	return l.p.shared.Kube.CoreV1().ConfigMaps(ns).Get(l.ctx, name, metav1.GetOptions{})
}

func (l lookup) Secret(ns, name string) (*corev1.Secret, error) {
	if s, err := l.p.secrets.Secrets(ns).Get(name); err == nil {
		return s, nil
	}
	return l.p.shared.Kube.CoreV1().Secrets(ns).Get(l.ctx, name, metav1.GetOptions{})
}

func (st *podState) volumeDir(name string) string { return filepath.Join(st.dir, "volumes", name) }

// syncVolumes (re)writes the pod's file-backed volumes from their sources,
// atomically, and creates emptyDir directories.
func (p *Provider) syncVolumes(ctx context.Context, st *podState) error {
	st.volMu.Lock()
	defer st.volMu.Unlock()
	st.mu.Lock()
	pod := st.pod.DeepCopy()
	deleting := st.deleting
	st.mu.Unlock()
	if deleting {
		return nil
	}
	owner := volumeOwner(pod)
	for _, v := range pod.Spec.Volumes {
		dir := st.volumeDir(v.Name)
		if v.PersistentVolumeClaim != nil {
			if _, ok := st.claimDirs[v.Name]; ok {
				continue
			}
			dir, err := p.claimDir(ctx, pod, v.PersistentVolumeClaim)
			if err != nil {
				return fmt.Errorf("volume %s: %w", v.Name, err)
			}
			st.claimDirs[v.Name] = dir
			continue
		}
		if v.EmptyDir != nil {
			if _, err := os.Stat(dir); err == nil {
				continue
			}
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return err
			}
			if err := os.Chmod(dir, 0o777); err != nil { // world-writable like a kubelet's emptyDir
				return err
			}
			if owner.UID >= 0 || owner.GID >= 0 {
				_ = os.Chown(dir, owner.UID, owner.GID)
			}
			continue
		}
		files, err := p.volumeFiles(ctx, st, pod, v)
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if files == nil {
			continue // not a file-backed volume
		}
		h := hashFiles(files)
		if st.volHash[v.Name] == h {
			continue
		}
		if _, err := atomicdir.Write(dir, files, owner); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		st.volHash[v.Name] = h
	}
	return nil
}

// volumeOwner makes projected files readable by the pod's user even when a
// restrictive defaultMode is set (a kubelet achieves the same with fsGroup).
func volumeOwner(pod *corev1.Pod) atomicdir.Owner {
	o := atomicdir.NoOwner
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			o.UID = int(*psc.RunAsUser)
		}
		if psc.FSGroup != nil {
			o.GID = int(*psc.FSGroup)
		} else if psc.RunAsGroup != nil {
			o.GID = int(*psc.RunAsGroup)
		}
	}
	if o.UID < 0 {
		for _, c := range slices.Concat(pod.Spec.Containers, pod.Spec.InitContainers) {
			if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
				o.UID = int(*c.SecurityContext.RunAsUser)
				if o.GID < 0 && c.SecurityContext.RunAsGroup != nil {
					o.GID = int(*c.SecurityContext.RunAsGroup)
				}
				break
			}
		}
	}
	return o
}

func hashFiles(files []atomicdir.File) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00", f.Path, f.Mode, len(f.Data))
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// volumeFiles returns the payload of a file-backed volume, or nil for other
// kinds.
func (p *Provider) volumeFiles(ctx context.Context, st *podState, pod *corev1.Pod, v corev1.Volume) ([]atomicdir.File, error) {
	lk := p.lookup(ctx)
	files := []atomicdir.File{}
	switch {
	case v.ConfigMap != nil:
		return configMapFiles(lk, pod.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.DefaultMode, v.ConfigMap.Optional)
	case v.Secret != nil:
		return secretFiles(lk, pod.Namespace, v.Secret.SecretName, v.Secret.Items, v.Secret.DefaultMode, v.Secret.Optional)
	case v.DownwardAPI != nil:
		return downwardFiles(st, pod, v.DownwardAPI.Items, v.DownwardAPI.DefaultMode)
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			var part []atomicdir.File
			var err error
			switch {
			case src.ConfigMap != nil:
				part, err = configMapFiles(lk, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, v.Projected.DefaultMode, src.ConfigMap.Optional)
			case src.Secret != nil:
				part, err = secretFiles(lk, pod.Namespace, src.Secret.Name, src.Secret.Items, v.Projected.DefaultMode, src.Secret.Optional)
			case src.DownwardAPI != nil:
				part, err = downwardFiles(st, pod, src.DownwardAPI.Items, v.Projected.DefaultMode)
			case src.ServiceAccountToken != nil:
				part, err = p.tokenFile(ctx, st, pod, src.ServiceAccountToken, v.Projected.DefaultMode)
			}
			if err != nil {
				return nil, err
			}
			files = append(files, part...)
		}
		return files, nil
	case v.HostPath != nil, v.EmptyDir != nil, v.PersistentVolumeClaim != nil:
		return nil, nil
	}
	return nil, fmt.Errorf("volume kind not supported by the dev kubelet")
}

func mode(item *int32, def *int32) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item)
	case def != nil:
		return os.FileMode(*def)
	}
	return 0o644
}

func keyFiles(data map[string][]byte, items []corev1.KeyToPath, defMode *int32, what string) ([]atomicdir.File, error) {
	var out []atomicdir.File
	if len(items) == 0 {
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, atomicdir.File{Path: k, Data: data[k], Mode: mode(nil, defMode)})
		}
		return out, nil
	}
	for _, it := range items {
		d, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("%s has no key %q", what, it.Key)
		}
		out = append(out, atomicdir.File{Path: it.Path, Data: d, Mode: mode(it.Mode, defMode)})
	}
	return out, nil
}

func configMapFiles(lk lookup, ns, name string, items []corev1.KeyToPath, defMode *int32, optional *bool) ([]atomicdir.File, error) {
	cm, found, err := podenv.Fetch(lk.ConfigMap, ns, "configMap", name, optional)
	if !found {
		return []atomicdir.File{}, err // an optional, missing source is an empty volume
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles(data, items, defMode, "configMap "+name)
}

func secretFiles(lk lookup, ns, name string, items []corev1.KeyToPath, defMode *int32, optional *bool) ([]atomicdir.File, error) {
	s, found, err := podenv.Fetch(lk.Secret, ns, "secret", name, optional)
	if !found {
		return []atomicdir.File{}, err
	}
	return keyFiles(s.Data, items, defMode, "secret "+name)
}

func downwardFiles(st *podState, pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, defMode *int32) ([]atomicdir.File, error) {
	var out []atomicdir.File
	for _, it := range items {
		if it.FieldRef == nil {
			continue // resourceFieldRef files are not needed here
		}
		v, err := podenv.FieldValue(pod, it.FieldRef.FieldPath, podenv.Facts{PodIP: st.ip.String(), HostIP: st.hostIP.String()})
		if err != nil {
			return nil, err
		}
		out = append(out, atomicdir.File{Path: it.Path, Data: []byte(v), Mode: mode(it.Mode, defMode)})
	}
	return out, nil
}

// tokenFile requests a bound service-account token, refreshed once 80% of
// its lifetime has passed, as a kubelet does.
func (p *Provider) tokenFile(ctx context.Context, st *podState, pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection, defMode *int32) ([]atomicdir.File, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	st.mu.Lock()
	cached, ok := st.tokens[src.Path]
	st.mu.Unlock()
	if ok && time.Now().Before(cached.refreshAt) {
		return []atomicdir.File{{Path: src.Path, Data: cached.token, Mode: mode(nil, defMode)}}, nil
	}
	exp := int64(3600)
	if src.ExpirationSeconds != nil {
		exp = *src.ExpirationSeconds
	}
	var aud []string
	if src.Audience != "" {
		aud = []string{src.Audience}
	}
	tr, err := p.shared.Kube.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{
			Audiences:         aud,
			ExpirationSeconds: &exp,
			BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("service account token for %s: %w", sa, err)
	}
	life := time.Until(tr.Status.ExpirationTimestamp.Time)
	st.mu.Lock()
	if st.tokens == nil {
		st.tokens = map[string]cachedToken{}
	}
	st.tokens[src.Path] = cachedToken{token: []byte(tr.Status.Token), refreshAt: time.Now().Add(life * 8 / 10)}
	st.mu.Unlock()
	return []atomicdir.File{{Path: src.Path, Data: []byte(tr.Status.Token), Mode: mode(nil, defMode)}}, nil
}

type cachedToken struct {
	token     []byte
	refreshAt time.Time
}

// binds returns the Docker bind mounts of container c.
func (p *Provider) binds(st *podState, pod *corev1.Pod, c *corev1.Container) ([]string, error) {
	kinds := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		kinds[v.Name] = v
	}
	var out []string
	for _, m := range c.VolumeMounts {
		v, ok := kinds[m.Name]
		if !ok {
			return nil, fmt.Errorf("container %s mounts unknown volume %q", c.Name, m.Name)
		}
		src := st.volumeDir(v.Name)
		readOnly := m.ReadOnly
		switch {
		case v.HostPath != nil:
			src = v.HostPath.Path
		case v.PersistentVolumeClaim != nil:
			st.volMu.Lock()
			dir, ok := st.claimDirs[v.Name]
			st.volMu.Unlock()
			if !ok {
				return nil, fmt.Errorf("volume %s: claim %s not resolved yet", v.Name, v.PersistentVolumeClaim.ClaimName)
			}
			src = dir
			readOnly = readOnly || v.PersistentVolumeClaim.ReadOnly
		case v.EmptyDir != nil:
		default:
			readOnly = true // projected files are always read-only, as in a kubelet
		}
		if m.SubPath != "" {
			if strings.Contains(m.SubPath, "..") || filepath.IsAbs(m.SubPath) {
				return nil, fmt.Errorf("invalid subPath %q", m.SubPath)
			}
			src = filepath.Join(src, m.SubPath)
			switch {
			case v.EmptyDir != nil:
				if err := os.MkdirAll(src, 0o777); err != nil {
					return nil, err
				}
			case v.PersistentVolumeClaim != nil:
				// Created as a kubelet does; the fsGroup'd root's setgid bit gives it the group.
				if err := os.MkdirAll(src, 0o770); err != nil {
					return nil, err
				}
			default:
				if resolved, err := filepath.EvalSymlinks(src); err == nil {
					src = resolved // a subPath of a projected volume is a snapshot, as in Kubernetes
				}
			}
		}
		bind := src + ":" + m.MountPath
		if readOnly {
			bind += ":ro"
		}
		out = append(out, bind)
	}
	return out, nil
}
