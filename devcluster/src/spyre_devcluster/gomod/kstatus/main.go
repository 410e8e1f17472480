// kstatus prints what Flux's kstatus library (sigs.k8s.io/cli-utils) concludes of live
// objects: the tests' reader of SpyreModels and SpyreCaches as Flux and kpt see them
// (spyre_devcluster/kstatus.py builds it; versions in go.mod).
//
//	kstatus -kubeconfig FILE -namespace NS RESOURCE [NAME...]
//
// RESOURCE as kubectl spells it in full (spyremodels.v1alpha1.serving.spyre.dev); without
// names, every object of the namespace. One JSON line per object: its name, what kstatus
// concludes (status, message), and status.phase from the same read.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type reading struct {
	Name    string `json:"name"`
	Phase   string `json:"phase"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig of the API server to read")
	namespace := flag.String("namespace", "default", "the objects' namespace")
	flag.Parse()
	if flag.NArg() < 1 {
		fail("usage: kstatus -kubeconfig FILE -namespace NS RESOURCE.VERSION.GROUP [NAME...]")
	}
	gvr, _ := schema.ParseResourceArg(flag.Arg(0))
	if gvr == nil {
		fail("%s is not RESOURCE.VERSION.GROUP (e.g. spyremodels.v1alpha1.serving.spyre.dev)", flag.Arg(0))
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig %s: %v", *kubeconfig, err)
	}
	client := dynamic.NewForConfigOrDie(config).Resource(*gvr).Namespace(*namespace)
	ctx := context.Background()
	var objects []unstructured.Unstructured
	if flag.NArg() == 1 {
		list, err := client.List(ctx, metav1.ListOptions{})
		if err != nil {
			fail("listing %s in %s: %v", gvr.Resource, *namespace, err)
		}
		objects = list.Items
	}
	for _, name := range flag.Args()[1:] {
		obj, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			fail("reading %s %s/%s: %v", gvr.Resource, *namespace, name, err)
		}
		objects = append(objects, *obj)
	}
	out := json.NewEncoder(os.Stdout)
	for i := range objects {
		result, err := status.Compute(&objects[i])
		if err != nil {
			fail("kstatus of %s: %v", objects[i].GetName(), err)
		}
		phase, _, _ := unstructured.NestedString(objects[i].Object, "status", "phase")
		said := reading{objects[i].GetName(), phase, result.Status.String(), result.Message}
		if err := out.Encode(said); err != nil {
			fail("writing: %v", err)
		}
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kstatus: "+format+"\n", args...)
	os.Exit(2)
}
