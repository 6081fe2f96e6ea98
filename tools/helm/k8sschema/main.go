// Command k8sschema writes strict JSON schemas of the built-in Kubernetes
// kinds for kubeconform, offline: it reflects over the Go types of the
// k8s.io/api module this tools module pins (the release of the API the
// schemas describe), instead of downloading kubernetes-json-schema.
//
// Files are named as kubeconform's -schema-location template
// '{{ .ResourceKind }}{{ .KindSuffix }}.json' expects (deployment-apps-v1.json,
// service-v1.json, networkpolicy-networking-v1.json). The schemas are
// strict: an object admits only the fields its Go type has (a misspelt or
// misplaced key fails), and values must have the field's type. They check
// no required fields and no enumerations: Go types do not carry those; the
// API server still checks them at apply time.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func main() {
	out := flag.String("out", "", "directory to write the schemas into")
	flag.Parse()
	if *out == "" {
		log.Fatal("k8sschema: -out is required")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme,
		policyv1.AddToScheme, networkingv1.AddToScheme, rbacv1.AddToScheme, autoscalingv2.AddToScheme} {
		if err := add(scheme); err != nil {
			log.Fatal(err)
		}
	}
	n := 0
	for gvk, t := range scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "Options") || gvk.Kind == "WatchEvent" {
			continue
		}
		r := &reflector{defs: map[string]any{}}
		root := r.schemaOf(t)
		root["definitions"] = r.defs
		suffix := "-" + gvk.Version
		if gvk.Group != "" {
			suffix = "-" + strings.ToLower(strings.Split(gvk.Group, ".")[0]) + suffix
		}
		raw, err := json.Marshal(root)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*out, strings.ToLower(gvk.Kind)+suffix+".json"), raw, 0o644); err != nil {
			log.Fatal(err)
		}
		n++
	}
	fmt.Fprintf(os.Stderr, "k8sschema: %d schemas in %s\n", n, *out)
}

// reflector turns Go types into JSON schema; named structs become
// definitions (types refer to themselves, e.g. JSONSchemaProps).
type reflector struct{ defs map[string]any }

var (
	quantityType    = reflect.TypeFor[resource.Quantity]()
	intOrStringType = reflect.TypeFor[intstr.IntOrString]()
	timeType        = reflect.TypeFor[metav1.Time]()
	microTimeType   = reflect.TypeFor[metav1.MicroTime]()
	durationType    = reflect.TypeFor[metav1.Duration]()
	marshalerType   = reflect.TypeFor[json.Marshaler]()
)

// nullable admits null as well: rendered manifests often carry it
// (creationTimestamp: null), and the API server treats it as absent.
func nullable(types ...string) map[string]any {
	return map[string]any{"type": append(types, "null")}
}

func (r *reflector) schemaOf(t reflect.Type) map[string]any {
	switch t {
	case quantityType:
		return nullable("string", "number")
	case intOrStringType:
		return nullable("string", "integer")
	case timeType, microTimeType, durationType:
		return nullable("string")
	}
	switch t.Kind() {
	case reflect.Pointer:
		return r.schemaOf(t.Elem())
	case reflect.Bool:
		return nullable("boolean")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return nullable("integer")
	case reflect.Float32, reflect.Float64:
		return nullable("number")
	case reflect.String:
		return nullable("string")
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return nullable("string") // []byte is base64
		}
		s := nullable("array")
		s["items"] = r.schemaOf(t.Elem())
		return s
	case reflect.Map:
		s := nullable("object")
		s["additionalProperties"] = r.schemaOf(t.Elem())
		return s
	case reflect.Interface:
		return map[string]any{}
	case reflect.Struct:
		if t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType) {
			return map[string]any{} // its own JSON form (RawExtension and the like): anything
		}
		name := strings.ReplaceAll(t.PkgPath()+"."+t.Name(), "/", "_")
		if _, ok := r.defs[name]; !ok {
			r.defs[name] = nil // placeholder: recursion refers to it
			r.defs[name] = r.structSchema(t)
		}
		return map[string]any{"$ref": "#/definitions/" + name}
	}
	return map[string]any{}
}

func (r *reflector) structSchema(t reflect.Type) map[string]any {
	props := map[string]any{}
	r.fields(t, props)
	s := nullable("object")
	s["properties"] = props
	s["additionalProperties"] = false
	return s
}

// fields adds t's JSON fields to props, inlining embedded structs (TypeMeta).
func (r *reflector) fields(t reflect.Type, props map[string]any) {
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			r.fields(ft, props)
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = r.schemaOf(f.Type)
	}
}
