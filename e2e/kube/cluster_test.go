package kube

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// cluster is etcd plus kube-apiserver on 127.0.0.1, with RBAC
// authorization, client-certificate admin access and ServiceAccount tokens
// signed by a key generated here.
type cluster struct {
	dir    string
	url    string
	caPEM  []byte
	pki    *pki
	admin  *rest.Config
	client kubernetes.Interface
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	// warnings collects every API warning the admin client received.
	warnings *warningRecorder

	procs []*proc
}

// proc is a started process; exited is closed when it ends.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// stop ends the process (terminate).
func (p *proc) stop() { terminate(p.cmd, p.exited) }

// terminate asks cmd's process to end (SIGTERM), kills it after 15 s, and
// returns once exited is closed (the process has been waited for).
func terminate(cmd *exec.Cmd, exited <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

var (
	clusterOnce sync.Once
	shared      *cluster
	clusterErr  error
)

// getCluster starts the shared cluster on first use; tests skip when the
// suite is disabled and fail when the cluster does not start.
func getCluster(t *testing.T) *cluster {
	t.Helper()
	need(t)
	clusterOnce.Do(func() {
		start := time.Now()
		shared, clusterErr = startCluster()
		if clusterErr == nil {
			fmt.Fprintf(os.Stderr, "e2e/kube: etcd and kube-apiserver ready in %s at %s\n", time.Since(start).Round(time.Millisecond), shared.url)
		}
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return shared
}

func stopCluster() {
	if shared == nil {
		return
	}
	// The API server first, so it does not log etcd going away.
	for i := len(shared.procs) - 1; i >= 0; i-- {
		p := shared.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	if os.Getenv("PROXY_TOPOLOGY_E2E_KEEP") == "" {
		os.RemoveAll(shared.dir)
	} else {
		fmt.Fprintln(os.Stderr, "e2e/kube: kept", shared.dir)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startCluster() (*cluster, error) {
	dir, err := os.MkdirTemp("", "pte2e-kube-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, warnings: &warningRecorder{}}
	ok := false
	defer func() {
		if !ok {
			shared = c
			stopCluster()
			shared = nil
		}
	}()
	pki, err := writePKI(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	c.caPEM, c.pki = pki.caPEM, pki

	clientPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	if err := c.start("etcd", tools["ETCD"],
		"--name=e2e", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL, "--log-level=warn", "--logger=zap",
	); err != nil {
		return nil, err
	}
	if err := c.waitHTTP(etcdURL+"/health", http.DefaultClient, 30*time.Second); err != nil {
		return nil, fmt.Errorf("etcd did not become healthy: %w\n%s", err, tail(filepath.Join(dir, "etcd.log")))
	}

	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c.url = "https://127.0.0.1:" + strconv.Itoa(port)
	if err := c.start("kube-apiserver", tools["KUBE_APISERVER"],
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file="+pki.serverCert, "--tls-private-key-file="+pki.serverKey,
		"--client-ca-file="+pki.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.saPub, "--service-account-signing-key-file="+pki.saKey,
		"--service-cluster-ip-range=10.96.0.0/24",
		// Node: e2e-node's kubelets, as system:node:<name>.
		"--authorization-mode=Node,RBAC",
		// A kubelet's InternalIP is what the API server would dial (it
		// never does here: no logs or exec); never a node name.
		"--kubelet-preferred-address-types=InternalIP",
		// 127.0.0.1 cannot be the kubernetes Service's endpoint.
		"--endpoint-reconciler-type=none",
		// The node plugin is privileged; clusters that run CSI drivers
		// allow that (kubeadm does).
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=1",
	); err != nil {
		return nil, err
	}

	c.admin = &rest.Config{
		Host: c.url,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: pki.caPEM, CertData: pki.adminCertPEM, KeyData: pki.adminKeyPEM,
		},
		WarningHandler: c.warnings,
		QPS:            100, Burst: 200,
	}
	hc, err := rest.HTTPClientFor(c.admin)
	if err != nil {
		return nil, err
	}
	if err := c.waitHTTP(c.url+"/readyz", hc, 90*time.Second); err != nil {
		return nil, fmt.Errorf("kube-apiserver did not become ready: %w\n%s", err, tail(filepath.Join(dir, "kube-apiserver.log")))
	}
	if c.client, err = kubernetes.NewForConfig(c.admin); err != nil {
		return nil, err
	}
	if c.dyn, err = dynamic.NewForConfig(c.admin); err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.admin)
	if err != nil {
		return nil, err
	}
	c.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	ok = true
	return c, nil
}

func (c *cluster) start(name, path string, args ...string) error {
	logf, err := os.Create(filepath.Join(c.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.exited) }()
	c.procs = append(c.procs, p)
	return nil
}

// waitHTTP polls url until it answers 200, the last started process
// exits, or timeout.
func (c *cluster) waitHTTP(url string, hc *http.Client, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := fmt.Errorf("%s: no answer", url)
	p := c.procs[len(c.procs)-1]
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited (%v) before %s answered", filepath.Base(p.cmd.Path), p.cmd.ProcessState, url)
		default:
		}
		resp, err := hc.Get(url)
		if err == nil {
			body := new(bytes.Buffer)
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(body.String()))
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return last
}

// tail returns the end of a log file for failure messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// token returns a ServiceAccount token from the TokenRequest API, as
// kubelet would project into the pod.
func (c *cluster) token(t *testing.T, namespace, sa string) string {
	t.Helper()
	exp := int64(3600)
	tr, err := c.client.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, sa, err)
	}
	return tr.Status.Token
}

// kubeconfig writes a kubeconfig that authenticates with token.
func (c *cluster) kubeconfig(t *testing.T, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.writeKubeconfig(path, &clientcmdapi.AuthInfo{Token: token}); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeKubeconfig writes a kubeconfig for the test cluster that
// authenticates as user, built as data with client-go's own types.
func (c *cluster) writeKubeconfig(path string, user *clientcmdapi.AuthInfo) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.url, CertificateAuthorityData: c.caPEM}
	cfg.AuthInfos["user"] = user
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "user"}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, path)
}

// as returns a clientset that authenticates with token.
func (c *cluster) as(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: c.url, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: c.caPEM}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// warningRecorder keeps the API's warnings (deprecations, PodSecurity).
type warningRecorder struct {
	mu   sync.Mutex
	list []string
}

func (w *warningRecorder) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	w.list = append(w.list, text)
	w.mu.Unlock()
}

// since returns the warnings after the first n.
func (w *warningRecorder) since(n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list[n:]...)
}

func (w *warningRecorder) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.list)
}

// pki holds the files kube-apiserver needs, generated for this run.
type pki struct {
	caCert, serverCert, serverKey, saKey, saPub string
	caPEM, adminCertPEM, adminKeyPEM            []byte
	// components are client certificates (PEM cert, key) by user name for
	// kube-scheduler and kube-controller-manager, which the API server's
	// bootstrap RBAC authorizes as they are.
	components map[string][2][]byte
	// issue signs a certificate with the CA (e2e-node's kubelets get
	// theirs from it).
	issue func(serial int64, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) (certPEM, keyPEM []byte, err error)
}

func writePKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "proxy-topology-e2e-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	issue := func(serial int64, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: subject,
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: ips, DNSNames: dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
	}
	p.issue = issue
	serverCert, serverKey, err := issue(2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}, []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return nil, err
	}
	// system:masters: the admin that applies the manifests. Everything
	// else in the tests authenticates as a ServiceAccount.
	if p.adminCertPEM, p.adminKeyPEM, err = issue(3, pkix.Name{CommonName: "e2e-admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return nil, err
	}
	p.components = map[string][2][]byte{}
	for i, user := range []string{"system:kube-scheduler", "system:kube-controller-manager"} {
		cert, key, err := issue(int64(4+i), pkix.Name{CommonName: user}, x509.ExtKeyUsageClientAuth, nil, nil)
		if err != nil {
			return nil, err
		}
		p.components[user] = [2][]byte{cert, key}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	files := []struct {
		path *string
		name string
		data []byte
	}{
		{&p.caCert, "ca.crt", p.caPEM},
		{&p.serverCert, "apiserver.crt", serverCert},
		{&p.serverKey, "apiserver.key", serverKey},
		{&p.saKey, "sa.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER})},
		{&p.saPub, "sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})},
	}
	for _, f := range files {
		*f.path = filepath.Join(dir, f.name)
		if err := os.WriteFile(*f.path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}
