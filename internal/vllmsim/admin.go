package vllmsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// AdminHandler returns the fleet's control API:
//
//	GET /load            → {"rate":…, "pattern":…, "replicas":…, "waiting":…, "running":…, "held":…}
//	PUT /load?rate=12.5  → sets the arrival rate (requests per second) and answers as GET;
//	                       a missing, malformed, negative or infinite rate is a 400;
//	                       &pattern=steady|poisson|bursty&seed=N also sets how requests arrive
//	GET /latency         → the fleet's time-to-first-token histogram since it started, every
//	                       replica that served included (also those gone)
//	GET /metrics         → with an InferencePool, the endpoint picker's metrics (404 without)
//	PUT /replay          → replays the request trace in the body (Azure LLM inference trace
//	                       CSV: TIMESTAMP,ContextTokens,GeneratedTokens) from now, each request
//	                       at its time with its lengths; a malformed trace is a 400 naming lines
//	GET /replay          → the replay's progress and its requests' exact TTFT quantiles
func (f *Fleet) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/replay", f.serveReplay)
	mux.HandleFunc("/load", f.serveLoad)
	mux.HandleFunc("/metrics", f.servePickerMetrics)
	mux.HandleFunc("/latency", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]Histogram{"ttft": f.TTFT()})
	})
	return mux
}

// servePickerMetrics serves what llm-d's endpoint picker exports about its pool under its
// current names (llm_d_epp_*, sigs.k8s.io/gateway-api-inference-extension's successor): the
// flow-control queue, once a request has queued, and the ready endpoints.
func (f *Fleet) servePickerMetrics(w http.ResponseWriter, _ *http.Request) {
	if f.pool == "" {
		http.Error(w, "no endpoint picker: start the emulator with --inference-pool", http.StatusNotFound)
		return
	}
	st := f.Status()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# HELP llm_d_epp_ready_endpoints Number of ready endpoints in the pool.\n# TYPE llm_d_epp_ready_endpoints gauge\n")
	fmt.Fprintf(w, "llm_d_epp_ready_endpoints{name=%q} %d\n", f.pool, st.Replicas)
	if f.load.everHeld() {
		fmt.Fprintf(w, "# HELP llm_d_epp_flow_control_queue_size Number of requests held in the flow control queue.\n# TYPE llm_d_epp_flow_control_queue_size gauge\n")
		fmt.Fprintf(w, "llm_d_epp_flow_control_queue_size{fairness_id=\"default\",inference_pool=%q,model_name=%q,priority=\"0\",target_model_name=%q} %d\n",
			f.pool, f.cfg.Model, f.cfg.Model, st.Held)
	}
}

func (f *Fleet) serveReplay(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		rep, ok := f.Replay()
		if !ok {
			http.Error(w, "no replay: PUT /replay with a request trace first", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	case http.MethodPut:
		reqs, err := ReadAzureTrace(http.MaxBytesReader(w, r.Body, 256<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(f.StartReplay(reqs))
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		http.Error(w, fmt.Sprintf("method %s is not allowed on /replay: PUT a request trace, GET its progress", r.Method), http.StatusMethodNotAllowed)
	}
}

func (f *Fleet) serveLoad(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	case http.MethodPut:
		if msg := f.setRate(r.URL.Query()["rate"]); msg != "" {
			http.Error(w, msg, http.StatusBadRequest)
			return
		}
		if msg := f.setPattern(r.URL.Query()); msg != "" {
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

// setPattern applies the optional pattern and seed query values.
func (f *Fleet) setPattern(q map[string][]string) string {
	ps, seeds := q["pattern"], q["seed"]
	if len(ps) == 0 {
		if len(seeds) > 0 {
			return "seed needs pattern=poisson or pattern=bursty"
		}
		return ""
	}
	p, err := ParsePattern(ps[0])
	if err != nil || len(ps) > 1 {
		return fmt.Sprintf("pattern %q: want one of steady, poisson, bursty", strings.Join(ps, ","))
	}
	seed := uint64(1)
	if len(seeds) > 0 {
		if seed, err = strconv.ParseUint(seeds[0], 10, 64); err != nil || len(seeds) > 1 {
			return fmt.Sprintf("seed %q: want one whole number", strings.Join(seeds, ","))
		}
	}
	f.load.SetPattern(p, seed)
	return ""
}
