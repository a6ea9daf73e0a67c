package vllmsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// AdminHandler returns the fleet's control API:
//
//	GET /load            → {"rate":…, "replicas":…, "waiting":…, "running":…}
//	PUT /load?rate=12.5  → sets the arrival rate (requests per second) and answers as GET;
//	                       a missing, malformed, negative or infinite rate is a 400.
func (f *Fleet) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/load", f.serveLoad)
	return mux
}

func (f *Fleet) serveLoad(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	case http.MethodPut:
		if msg := f.setRate(r.URL.Query()["rate"]); msg != "" {
			http.Error(w, msg, http.StatusBadRequest)
			return
		}
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		http.Error(w, fmt.Sprintf("method %s is not allowed on /load: use GET, or PUT /load?rate=<requests per second>", r.Method), http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(f.Status())
}

// setRate applies the rate query values and returns what is wrong with them, if anything.
func (f *Fleet) setRate(values []string) string {
	if len(values) != 1 || values[0] == "" {
		return "PUT /load needs exactly one query parameter rate=<requests per second>, for example PUT /load?rate=12.5"
	}
	rate, err := strconv.ParseFloat(values[0], 64)
	if err != nil {
		return fmt.Sprintf("rate %q is not a number of requests per second", values[0])
	}
	if err := f.load.SetRate(rate); err != nil {
		return err.Error()
	}
	return ""
}
