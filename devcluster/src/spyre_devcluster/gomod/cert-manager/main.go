// cert-manager for the testbed: its controllers and its cainjector from the library
// packages of github.com/cert-manager/cert-manager (version in go.mod). The module proxy
// serves that module but not the nested modules of its commands (cmd/controller,
// cmd/cainjector), so this is our own small entry point to the same packages:
//
//	cert-manager controller -kubeconfig FILE -cluster-resource-namespace NS
//	cert-manager cainjector -kubeconfig FILE
//
// controller runs every controller registered by the imports below (the self-signed and
// CA issuers, and the Certificate and CertificateRequest controllers that drive them);
// cainjector sets the caBundle of webhook configurations annotated
// cert-manager.io/inject-ca-from. Built by spyre_devcluster/install.py (go_commands).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/stdr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	controller "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

const workers = 2

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: cert-manager controller|cainjector -kubeconfig FILE"))
	}
	command, flags := os.Args[1], flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "the kubeconfig of the API server")
	namespace := flags.String("cluster-resource-namespace", "cert-manager",
		"where ClusterIssuers keep their Secrets")
	_ = flags.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := stdr.New(nil)
	ctx = logf.NewContext(ctx, log)
	ctrl.SetLogger(log)
	switch command {
	case "controller":
		fail(controllers(ctx, log, *kubeconfig, *namespace))
	case "cainjector":
		fail(injector(ctx, *kubeconfig))
	default:
		fail(fmt.Errorf("unknown command %q: controller or cainjector", command))
	}
}

// controllers constructs every registered controller, starts the informers they asked
// for, then runs them until ctx ends.
func controllers(ctx context.Context, log logr.Logger, kubeconfig, namespace string) error {
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:    kubeconfig,
		IssuerOptions: controller.IssuerOptions{ClusterResourceNamespace: namespace},
		CertificateOptions: controller.CertificateOptions{ // cert-manager's defaults
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	known := controller.Known()
	names := make([]string, 0, len(known))
	for name := range known {
		names = append(names, name)
	}
	sort.Strings(names)
	running := make([]controller.Interface, 0, len(names))
	for _, name := range names {
		made, err := known[name](factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		running = append(running, made)
	}
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	log.Info("running", "controllers", names)
	errs := make(chan error, len(running))
	for i, each := range running {
		go func() { errs <- fmt.Errorf("controller %s: %w", names[i], each.Run(workers, ctx)) }()
	}
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		return nil
	}
}

// injector runs the cainjector's reconcilers of webhook configurations.
func injector(ctx context.Context, kubeconfig string) error {
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	restConfig = util.RestConfigWithUserAgent(restConfig, "cainjector") // its field manager
	scheme := runtime.NewScheme()                                       // what the injector reads and writes
	for _, add := range []func(*runtime.Scheme) error{kscheme.AddToScheme, cmapi.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	manager, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// as cert-manager's own cainjector: Secrets are read from the API server, the
		// cache holds only their metadata (the injectors' watches)
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return err
	}
	options := cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.MutatingWebhookConfigurationName:   true,
		},
	}
	if err := cainjector.RegisterAllInjectors(ctx, manager, options); err != nil {
		return err
	}
	return manager.Start(ctx)
}

func fail(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager: %v\n", err)
		os.Exit(1)
	}
}
