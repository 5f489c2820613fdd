// containerd-stargz-grpc (local build): a minimal stargz remote snapshotter
// daemon that exposes github.com/containerd/stargz-snapshotter/service as a
// containerd snapshots gRPC service on a unix socket (for proxy_plugins).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/contrib/snapshotservice"
	"github.com/containerd/containerd/log"
	"github.com/containerd/stargz-snapshotter/service"
	"github.com/containerd/stargz-snapshotter/service/keychain/dockerconfig"
	"github.com/containerd/stargz-snapshotter/service/resolver"
	"github.com/pelletier/go-toml"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
)

const defaultConfigPath = "/etc/containerd-stargz-grpc/config.toml"

func main() {
	address := flag.String("address", "/run/containerd-stargz-grpc/containerd-stargz-grpc.sock", "unix socket to serve the snapshots gRPC API on")
	root := flag.String("root", "/var/lib/containerd-stargz-grpc", "state directory of the snapshotter")
	configPath := flag.String("config", defaultConfigPath, "path to TOML config (optional; ignored if the default path does not exist)")
	logLevel := flag.String("log-level", "info", "log level: debug, info, warn, error")
	flag.Parse()

	lvl, err := logrus.ParseLevel(*logLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bad -log-level %q: %v\n", *logLevel, err)
		os.Exit(2)
	}
	logrus.SetLevel(lvl)
	logrus.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})

	ctx, cancel := context.WithCancel(log.WithLogger(context.Background(), log.L))
	defer cancel()

	if err := run(ctx, *address, *root, *configPath); err != nil {
		log.G(ctx).WithError(err).Error("containerd-stargz-grpc exited with error")
		os.Exit(1)
	}
}

func loadConfig(path string) (service.Config, error) {
	var cfg service.Config
	if path == "" {
		return cfg, nil
	}
	if _, err := os.Stat(path); err != nil {
		if os.IsNotExist(err) && path == defaultConfigPath {
			return cfg, nil // default config file is optional
		}
		return cfg, fmt.Errorf("config %q: %w", path, err)
	}
	tree, err := toml.LoadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("parse config %q: %w", path, err)
	}
	if err := tree.Unmarshal(&cfg); err != nil {
		return cfg, fmt.Errorf("decode config %q: %w", path, err)
	}
	return cfg, nil
}

func run(ctx context.Context, address, root, configPath string) error {
	cfg, err := loadConfig(configPath)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(root, 0700); err != nil {
		return fmt.Errorf("create root %q: %w", root, err)
	}
	if err := service.Supported(root); err != nil {
		return fmt.Errorf("snapshotter not supported on %q (overlayfs needed): %w", root, err)
	}

	// Credentials: ~/.docker/config.json (and its credential helpers).
	creds := []resolver.Credential{dockerconfig.NewDockerconfigKeychain(ctx)}

	sn, err := service.NewStargzSnapshotterService(ctx, root, &cfg, service.WithCredsFuncs(creds...))
	if err != nil {
		return fmt.Errorf("create stargz snapshotter: %w", err)
	}

	rpc := grpc.NewServer()
	snapshotsapi.RegisterSnapshotsServer(rpc, snapshotservice.FromSnapshotter(sn))

	if err := os.MkdirAll(filepath.Dir(address), 0700); err != nil {
		return fmt.Errorf("create socket dir: %w", err)
	}
	if err := os.Remove(address); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove stale socket %q: %w", address, err)
	}
	l, err := net.Listen("unix", address)
	if err != nil {
		return fmt.Errorf("listen on %q: %w", address, err)
	}

	errCh := make(chan error, 1)
	go func() { errCh <- rpc.Serve(l) }()
	log.G(ctx).WithField("address", address).WithField("root", root).Info("serving stargz snapshotter")

	sigCh := make(chan os.Signal, 1)
	signal.Notify(sigCh, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sigCh:
		log.G(ctx).Infof("got %v, shutting down", s)
		rpc.GracefulStop()
	case err = <-errCh:
		log.G(ctx).WithError(err).Error("gRPC server stopped")
	}

	// Close unmounts all FUSE-mounted remote layers and releases the metadata DB.
	if cerr := sn.Close(); cerr != nil {
		log.G(ctx).WithError(cerr).Error("failed to close snapshotter")
		if err == nil {
			err = cerr
		}
	}
	os.Remove(address)
	return err
}
