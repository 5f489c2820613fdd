// Package v1alpha2 is a minimal local stand-in for k8s.io/cri-api/pkg/apis/runtime/v1alpha2,
// which Debian 12 does not package. It provides only the AuthConfig type that
// github.com/containerd/stargz-snapshotter/service/resolver (cri.go) references.
// The CRI keychain (service/keychain/cri) is NOT supported with this stub.
package v1alpha2

// AuthConfig mirrors the field set of the CRI runtime.v1alpha2.AuthConfig message.
type AuthConfig struct {
	Username      string
	Password      string
	Auth          string
	ServerAddress string
	IdentityToken string
	RegistryToken string
}
