// Command validate checks an OLM bundle with the operator framework's own validation
// library (github.com/operator-framework/api): the default bundle suite (the CSV, the CRDs,
// the bundle as a whole) and the OperatorHub, capabilities, categories and good-practice
// suites. It prints every finding, warnings too, and exits 1 on an error.
//
//	go run . [-k8s-version 1.37] BUNDLE_DIR
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
)

func main() {
	k8sVersion := flag.String("k8s-version", "", "check for APIs removed by this Kubernetes version")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: validate [-k8s-version X.Y] BUNDLE_DIR")
		os.Exit(2)
	}
	bundle, err := manifests.GetBundleFromDir(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot load the bundle in %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	objects := append(bundle.ObjectsToValidate(), map[string]string{"k8s-version": *k8sVersion})
	suites := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCapabilitiesValidator,
		validation.StandardCategoriesValidator,
		validation.GoodPracticesValidator,
	)
	failed := report(suites.Validate(objects...))
	if failed {
		os.Exit(1)
	}
	fmt.Printf("bundle %s: valid (%d suites)\n", bundle.Name, len(suites))
}

// report prints each finding as "LEVEL [object] detail"; true if one is an error.
func report(results []errors.ManifestResult) bool {
	failed := false
	for _, result := range results {
		for _, finding := range append(result.Errors, result.Warnings...) {
			fmt.Printf("%s [%s] %s\n", finding.Level, result.Name, finding.Error())
			failed = failed || finding.Level == errors.LevelError
		}
	}
	return failed
}
