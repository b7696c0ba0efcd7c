//! OGF JSDL 1.0 with the POSIX Application and HPC Profile Application extensions.
//!
//! Elements are matched by namespace URI and local name, so any prefix works.
//! Range values take `Exact`, else the lower bound, else the upper bound.

use brokk_model::{Duration, EnvVar, InputFile, Job, Memory, MemoryScope, OutputFile};
use quick_xml::escape::escape;
use quick_xml::events::Event;
use quick_xml::name::ResolveResult;
use quick_xml::NsReader;

use crate::diag::Diagnostic;
use crate::{Dropped, ParseError, Parsed, Written};

const NS_JSDL: &str = "http://schemas.ggf.org/jsdl/2005/11/jsdl";
const NS_POSIX: &str = "http://schemas.ggf.org/jsdl/2005/11/jsdl-posix";
const NS_HPCPA: &str = "http://schemas.ggf.org/jsdl/2006/07/jsdl-hpcpa";
/// The SPMD Application extension (GFD.115): parallel programs.
const NS_SPMD: &str = "http://schemas.ogf.org/jsdl/2007/02/jsdl-spmd";
/// NorduGrid's JSDL extension, which ARC clients use for runtime environments and queues.
const NS_ARC: &str = "http://www.nordugrid.org/ws/schemas/jsdl-arc";
const MIB: f64 = 1024.0 * 1024.0;

#[derive(Debug, Default)]
struct Element {
    ns: String,
    name: String,
    attrs: Vec<(String, String)>,
    text: String,
    children: Vec<Element>,
    pos: usize,
}

impl Element {
    fn child(&self, ns: &str, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.ns == ns && c.name == name)
    }

    fn text(&self) -> String {
        self.text.trim().to_string()
    }
}

/// Elements nested deeper than this are refused: JSDL documents nest six or
/// seven levels, and every walk over the tree (dropping it too) recurses.
const MAX_DEPTH: usize = 64;

fn parse_tree(src: &str) -> Result<Element, Diagnostic> {
    let mut reader = NsReader::from_str(src);
    let mut stack: Vec<Element> = vec![Element::default()];
    loop {
        let pos = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
        let (ns, ev) = match reader.read_resolved_event() {
            Ok(x) => x,
            Err(e) => {
                let at = usize::try_from(reader.error_position()).unwrap_or(pos);
                return Err(Diagnostic::error_at(src, at, format!("malformed XML: {e}")));
            }
        };
        let ns = match ns {
            ResolveResult::Bound(n) => String::from_utf8_lossy(n.as_ref()).into_owned(),
            _ => String::new(),
        };
        match ev {
            Event::Start(ref e) | Event::Empty(ref e) => {
                let mut el = Element {
                    ns,
                    name: String::from_utf8_lossy(e.local_name().as_ref()).into_owned(),
                    pos,
                    ..Element::default()
                };
                for a in e.attributes() {
                    let a = a.map_err(|err| Diagnostic::error_at(src, pos, format!("malformed attribute: {err}")))?;
                    let v = a
                        .unescape_value()
                        .map_err(|err| Diagnostic::error_at(src, pos, format!("malformed attribute value: {err}")))?;
                    el.attrs.push((
                        String::from_utf8_lossy(a.key.local_name().as_ref()).into_owned(),
                        v.into_owned(),
                    ));
                }
                if matches!(ev, Event::Start(_)) {
                    if stack.len() > MAX_DEPTH {
                        return Err(Diagnostic::error_at(
                            src,
                            pos,
                            format!("elements nested too deeply (more than {MAX_DEPTH} levels)"),
                        ));
                    }
                    stack.push(el);
                } else if let Some(top) = stack.last_mut() {
                    top.children.push(el);
                }
            }
            Event::End(_) => {
                let done = stack.pop().unwrap_or_default();
                match stack.last_mut() {
                    Some(top) => top.children.push(done),
                    None => return Err(Diagnostic::error_at(src, pos, "unbalanced end tag")),
                }
            }
            Event::Text(t) => {
                let s = t
                    .unescape()
                    .map_err(|e| Diagnostic::error_at(src, pos, format!("malformed text: {e}")))?;
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&s);
                }
            }
            Event::CData(t) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&String::from_utf8_lossy(&t));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if stack.len() != 1 {
        return Err(Diagnostic::error_at(
            src,
            src.len(),
            "unexpected end of document: an element is not closed",
        ));
    }
    let mut root = stack.pop().unwrap_or_default();
    match root.children.len() {
        1 => Ok(root.children.remove(0)),
        0 => Err(Diagnostic::error_at(src, 0, "expected a <jsdl:JobDefinition> element")),
        _ => Err(Diagnostic::error_at(
            src,
            root.children[1].pos,
            "expected a single root element",
        )),
    }
}

/// Reads one JSDL JobDefinition.
pub(crate) fn read(src: &str) -> Result<Parsed, ParseError> {
    let root = parse_tree(src)?;
    if root.ns != NS_JSDL || root.name != "JobDefinition" {
        return Err(Diagnostic::error_at(
            src,
            root.pos,
            format!(
                "expected <JobDefinition> in namespace {NS_JSDL}, found <{}> in `{}`",
                root.name, root.ns
            ),
        )
        .into());
    }
    let Some(desc) = root.child(NS_JSDL, "JobDescription") else {
        return Err(Diagnostic::error_at(src, root.pos, "expected a <JobDescription> inside <JobDefinition>").into());
    };
    let mut r = JsdlReader {
        src,
        job: Job::default(),
        warnings: Vec::new(),
        errors: Vec::new(),
    };
    r.description(desc)?;
    if !r.errors.is_empty() {
        return Err(ParseError { diagnostics: r.errors });
    }
    Ok(Parsed {
        jobs: vec![r.job],
        warnings: r.warnings,
        together: false,
    })
}

struct JsdlReader<'a> {
    src: &'a str,
    job: Job,
    warnings: Vec<Diagnostic>,
    /// Errors of elements read past, so that one pass reports every error.
    errors: Vec<Diagnostic>,
}

impl JsdlReader<'_> {
    fn ignore(&mut self, el: &Element) {
        self.warnings.push(Diagnostic::warning_at(
            self.src,
            el.pos,
            format!("<{}> has no meaning for Brokk's model; ignored", el.name),
        ));
    }

    fn description(&mut self, desc: &Element) -> Result<(), Diagnostic> {
        for el in &desc.children {
            match (el.ns.as_str(), el.name.as_str()) {
                (NS_JSDL, "JobIdentification") => {
                    if let Some(n) = el.child(NS_JSDL, "JobName") {
                        self.job.name = Some(n.text());
                    }
                    if let Some(p) = el.child(NS_JSDL, "JobProject") {
                        self.job.project = Some(p.text());
                    }
                }
                (NS_JSDL, "Application") => {
                    if let Err(e) = self.application(el) {
                        self.errors.push(e);
                    }
                }
                (NS_JSDL, "Resources") => {
                    if let Err(e) = self.resources(el) {
                        self.errors.push(e);
                    }
                }
                (NS_JSDL, "DataStaging") => {
                    if let Err(e) = self.staging(el) {
                        self.errors.push(e);
                    }
                }
                _ => self.ignore(el),
            }
        }
        Ok(())
    }

    fn application(&mut self, app: &Element) -> Result<(), Diagnostic> {
        let (mut name, mut version) = (None, None);
        for el in &app.children {
            match (el.ns.as_str(), el.name.as_str()) {
                (NS_POSIX, "POSIXApplication") | (NS_HPCPA, "HPCProfileApplication") | (NS_SPMD, "SPMDApplication") => {
                    self.posix(el)?
                }
                // UNICORE's: the site resolves them to its own executable.
                (NS_JSDL, "ApplicationName") => name = Some(el.text().trim().to_string()).filter(|n| !n.is_empty()),
                (NS_JSDL, "ApplicationVersion") => {
                    version = Some((el.text().trim().to_string(), el.pos)).filter(|(v, _)| !v.is_empty())
                }
                (NS_JSDL, "Description") => {}
                _ => self.ignore(el),
            }
        }
        match (name, version) {
            // With an executable of its own, the name only describes it
            // (the JSDL specification's own gnuplot example).
            (Some(_), _) if self.job.executable.is_some() => {}
            (Some(name), version) => {
                self.job.application = Some(brokk_model::Application {
                    name,
                    version: version.map(|v| v.0),
                })
            }
            (None, Some((_, pos))) => self.warnings.push(Diagnostic::warning_at(
                self.src,
                pos,
                "<ApplicationVersion> without <ApplicationName> names no application; ignored",
            )),
            (None, None) => {}
        }
        Ok(())
    }

    fn posix(&mut self, app: &Element) -> Result<(), Diagnostic> {
        let ns = app.ns.as_str();
        let (mut processes, mut per_host, mut threads) = (None, None, None);
        // Every element is read, so that one pass reports every error.
        if let Err(e) = crate::each_reported(&app.children, |el| {
            // SPMD applications take the POSIX elements, in the POSIX namespace.
            let posix_inside_spmd = ns == NS_SPMD && el.ns == NS_POSIX;
            if el.ns != ns && !posix_inside_spmd {
                self.ignore(el);
                return Ok(());
            }
            match el.name.as_str() {
                "NumberOfProcesses" if ns == NS_SPMD => processes = Some(self.positive(el)?),
                "ProcessesPerHost" if ns == NS_SPMD => per_host = Some(self.positive(el)?),
                "ThreadsPerProcess" if ns == NS_SPMD => threads = Some(self.positive(el)?),
                "SPMDVariation" if ns == NS_SPMD => {
                    let kind = el.text();
                    let kind = kind.rsplit('/').next().unwrap_or("").to_string();
                    // `None`: a threaded program, started once, as Brokk starts it.
                    if kind.eq_ignore_ascii_case("none") {
                        return Ok(());
                    }
                    self.warnings.push(Diagnostic::warning_at(
                        self.src,
                        el.pos,
                        format!(
                            "<SPMDVariation> {kind}: Brokk starts the executable once with all the processors; \
                             the program (or an mpirun it calls) starts the {kind} processes"
                        ),
                    ));
                }
                "Executable" => self.job.executable = Some(el.text()),
                "Argument" => self.job.arguments.push(el.text()),
                "Input" => self.job.stdin = Some(el.text()),
                "Output" => self.job.stdout = Some(el.text()),
                "Error" => self.job.stderr = Some(el.text()),
                "WorkingDirectory" => self.job.working_directory = Some(el.text()),
                "Environment" => {
                    let Some((_, name)) = el.attrs.iter().find(|(k, _)| k == "name") else {
                        return Err(Diagnostic::error_at(
                            self.src,
                            el.pos,
                            "<Environment> needs a `name` attribute",
                        ));
                    };
                    self.job.environment.push(EnvVar {
                        name: name.clone(),
                        value: el.text.clone(),
                    });
                }
                "WallTimeLimit" if ns == NS_POSIX => self.job.wall_time = Some(Duration(self.integer(el)? as i64)),
                "CPUTimeLimit" if ns == NS_POSIX => self.job.cpu_time = Some(Duration(self.integer(el)? as i64)),
                "MemoryLimit" if ns == NS_POSIX => {
                    if self.job.memory.is_none() {
                        let mib = (self.integer(el)? as f64 / MIB).ceil() as u64;
                        self.job.memory = Some(Memory {
                            mib,
                            per: MemoryScope::Cpu,
                        });
                    }
                }
                _ => self.ignore(el),
            }
            Ok(())
        }) {
            self.errors.extend(e.diagnostics);
        }
        if ns == NS_SPMD {
            let threads = threads.unwrap_or(1);
            self.job.cpus_per_task = (threads > 1).then_some(threads);
            if let Some(p) = processes {
                self.job.cpus = Some(p.saturating_mul(threads));
            }
            if let Some(h) = per_host {
                self.job.cpus_per_node = Some(h.saturating_mul(threads));
            }
        }
        Ok(())
    }

    /// A count of at least one.
    fn positive(&self, el: &Element) -> Result<u32, Diagnostic> {
        match self.count(el)? {
            0 => Err(Diagnostic::error_at(
                self.src,
                el.pos,
                format!("<{}> must be at least 1", el.name),
            )),
            n => Ok(n),
        }
    }

    fn integer(&self, el: &Element) -> Result<u64, Diagnostic> {
        let t = el.text();
        t.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0 && *v < 1e18)
            .map(|v| v.ceil() as u64)
            .ok_or_else(|| {
                Diagnostic::error_at(
                    self.src,
                    el.pos,
                    format!("<{}> expects a non-negative number, found `{t}`", el.name),
                )
            })
    }

    /// A JSDL RangeValue: Exact, else the lower bound, else the upper bound.
    fn range(&self, el: &Element) -> Result<u64, Diagnostic> {
        let pick = el
            .child(NS_JSDL, "Exact")
            .or_else(|| el.child(NS_JSDL, "LowerBoundedRange"))
            .or_else(|| el.child(NS_JSDL, "Range").and_then(|r| r.child(NS_JSDL, "LowerBound")))
            .or_else(|| el.child(NS_JSDL, "UpperBoundedRange"))
            .or_else(|| el.child(NS_JSDL, "Range").and_then(|r| r.child(NS_JSDL, "UpperBound")));
        match pick {
            Some(v) => self.integer(v),
            None if !el.text().is_empty() => self.integer(el),
            None => Err(Diagnostic::error_at(
                self.src,
                el.pos,
                format!(
                    "<{}> expects <Exact>, <LowerBoundedRange>, <UpperBoundedRange> or <Range>",
                    el.name
                ),
            )),
        }
    }

    fn count(&self, el: &Element) -> Result<u32, Diagnostic> {
        u32::try_from(self.range(el)?)
            .map_err(|_| Diagnostic::error_at(self.src, el.pos, format!("<{}> is too large", el.name)))
    }

    fn resources(&mut self, res: &Element) -> Result<(), Diagnostic> {
        // Every element is read, so that one pass reports every error.
        if let Err(e) = crate::each_reported(&res.children, |el| {
            if el.ns == NS_ARC && el.name == "RunTimeEnvironment" {
                if let Some(n) = el.child(NS_ARC, "Name") {
                    self.job.runtime_environments.push(n.text());
                }
                return Ok(());
            }
            if el.ns == NS_ARC && el.name == "CandidateTarget" {
                if let Some(q) = el.child(NS_ARC, "QueueName") {
                    self.job.queue = Some(q.text());
                }
                return Ok(());
            }
            if el.ns != NS_JSDL {
                self.ignore(el);
                return Ok(());
            }
            match el.name.as_str() {
                "OperatingSystem" => {
                    if let Some(n) = el
                        .child(NS_JSDL, "OperatingSystemType")
                        .and_then(|t| t.child(NS_JSDL, "OperatingSystemName"))
                    {
                        self.job.operating_system = Some(n.text());
                    }
                }
                "CPUArchitecture" => {
                    if let Some(n) = el.child(NS_JSDL, "CPUArchitectureName") {
                        self.job.architecture = Some(n.text());
                    }
                }
                "TotalCPUCount" => self.job.cpus = Some(self.count(el)?),
                "IndividualCPUCount" => self.job.cpus_per_node = Some(self.count(el)?),
                "TotalResourceCount" => self.job.nodes = Some(self.count(el)?),
                "TotalPhysicalMemory" => {
                    let mib = (self.range(el)? as f64 / MIB).ceil() as u64;
                    self.job.memory = Some(Memory {
                        mib,
                        per: MemoryScope::Job,
                    });
                }
                "IndividualPhysicalMemory" => {
                    let mib = (self.range(el)? as f64 / MIB).ceil() as u64;
                    self.job.memory = Some(Memory {
                        mib,
                        per: MemoryScope::Node,
                    });
                }
                "TotalDiskSpace" => self.job.disk_mib = Some((self.range(el)? as f64 / MIB).ceil() as u64),
                "TotalCPUTime" => self.job.cpu_time = Some(Duration(self.range(el)? as i64)),
                _ => self.ignore(el),
            }
            Ok(())
        }) {
            self.errors.extend(e.diagnostics);
        }
        Ok(())
    }

    fn staging(&mut self, ds: &Element) -> Result<(), Diagnostic> {
        let Some(name) = ds.child(NS_JSDL, "FileName").map(Element::text) else {
            return Err(Diagnostic::error_at(
                self.src,
                ds.pos,
                "<DataStaging> needs a <FileName>",
            ));
        };
        let uri = |side: &str| {
            ds.child(NS_JSDL, side)
                .and_then(|s| s.child(NS_JSDL, "URI"))
                .map(Element::text)
        };
        let (source, target) = (uri("Source"), uri("Target"));
        let has = |side: &str| ds.child(NS_JSDL, side).is_some();
        // An empty <Source/> is a file the client uploads (as ARC reads it);
        // an empty <Target/>, or neither side, a file the job leaves in its
        // directory for its owner to fetch.
        if has("Source") {
            self.job.input_files.push(InputFile {
                name: name.clone(),
                source,
                size: None,
                local: None,
            });
        }
        if has("Target") || !has("Source") {
            self.job.output_files.push(OutputFile {
                name,
                target,
                size_estimate: None,
            });
        }
        Ok(())
    }
}

/// Writes one job as a JSDL document with the POSIX application extension.
pub(crate) fn write(job: &Job) -> Written {
    let mut d = Dropped::default();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    x.push_str(&format!(
        "<jsdl:JobDefinition xmlns:jsdl=\"{NS_JSDL}\" xmlns:jsdl-posix=\"{NS_POSIX}\" xmlns:arc=\"{NS_ARC}\">\n  <jsdl:JobDescription>\n"
    ));
    let el = |x: &mut String, indent: usize, tag: &str, text: &str| {
        x.push_str(&format!("{}<{tag}>{}</{tag}>\n", " ".repeat(indent), escape(text)));
    };
    if job.name.is_some() || job.project.is_some() {
        x.push_str("    <jsdl:JobIdentification>\n");
        if let Some(n) = &job.name {
            el(&mut x, 6, "jsdl:JobName", n);
        }
        if let Some(p) = &job.project {
            el(&mut x, 6, "jsdl:JobProject", p);
        }
        x.push_str("    </jsdl:JobIdentification>\n");
    }
    x.push_str("    <jsdl:Application>\n");
    if let Some(app) = &job.application {
        el(&mut x, 6, "jsdl:ApplicationName", &app.name);
        if let Some(v) = &app.version {
            el(&mut x, 6, "jsdl:ApplicationVersion", v);
        }
    }
    x.push_str("      <jsdl-posix:POSIXApplication>\n");
    if let Some(e) = &job.executable {
        el(&mut x, 8, "jsdl-posix:Executable", e);
    }
    for a in &job.arguments {
        el(&mut x, 8, "jsdl-posix:Argument", a);
    }
    for (tag, v) in [
        ("Input", &job.stdin),
        ("Output", &job.stdout),
        ("Error", &job.stderr),
        ("WorkingDirectory", &job.working_directory),
    ] {
        if let Some(v) = v {
            el(&mut x, 8, &format!("jsdl-posix:{tag}"), v);
        }
    }
    for e in &job.environment {
        x.push_str(&format!(
            "        <jsdl-posix:Environment name=\"{}\">{}</jsdl-posix:Environment>\n",
            escape(&e.name),
            escape(&e.value)
        ));
    }
    if let Some(w) = job.wall_time {
        el(&mut x, 8, "jsdl-posix:WallTimeLimit", &w.0.to_string());
    }
    if let Some(c) = job.cpu_time {
        el(&mut x, 8, "jsdl-posix:CPUTimeLimit", &c.0.to_string());
    }
    x.push_str("      </jsdl-posix:POSIXApplication>\n    </jsdl:Application>\n");

    let mut res = String::new();
    let exact = |res: &mut String, tag: &str, v: u64| {
        res.push_str(&format!(
            "      <jsdl:{tag}><jsdl:Exact>{v}</jsdl:Exact></jsdl:{tag}>\n"
        ));
    };
    if let Some(os) = &job.operating_system {
        res.push_str(&format!(
            "      <jsdl:OperatingSystem><jsdl:OperatingSystemType><jsdl:OperatingSystemName>{}</jsdl:OperatingSystemName></jsdl:OperatingSystemType></jsdl:OperatingSystem>\n",
            escape(os)
        ));
    }
    if let Some(a) = &job.architecture {
        res.push_str(&format!(
            "      <jsdl:CPUArchitecture><jsdl:CPUArchitectureName>{}</jsdl:CPUArchitectureName></jsdl:CPUArchitecture>\n",
            escape(a)
        ));
    }
    if let Some(n) = job.cpus_per_node {
        exact(&mut res, "IndividualCPUCount", n.into());
    }
    if let Some(n) = job.cpus {
        exact(&mut res, "TotalCPUCount", n.into());
    }
    if let Some(n) = job.nodes {
        exact(&mut res, "TotalResourceCount", n.into());
    }
    if let Some(m) = job.memory {
        let mib = match m.per {
            MemoryScope::Node => Some(("IndividualPhysicalMemory", m.mib)),
            _ => job.memory_total_mib().map(|t| ("TotalPhysicalMemory", t)),
        };
        match mib {
            Some((tag, mib)) => exact(&mut res, tag, mib.saturating_mul(1 << 20)),
            None => d.note("memory: cannot be turned into a total for JSDL"),
        }
    }
    if let Some(disk) = job.disk_mib {
        exact(&mut res, "TotalDiskSpace", disk.saturating_mul(1 << 20));
    }
    for r in &job.runtime_environments {
        res.push_str(&format!(
            "      <arc:RunTimeEnvironment><arc:Name>{}</arc:Name></arc:RunTimeEnvironment>\n",
            escape(r)
        ));
    }
    if let Some(q) = &job.queue {
        res.push_str(&format!(
            "      <arc:CandidateTarget><arc:QueueName>{}</arc:QueueName></arc:CandidateTarget>\n",
            escape(q)
        ));
    }
    if !res.is_empty() {
        x.push_str("    <jsdl:Resources>\n");
        x.push_str(&res);
        x.push_str("    </jsdl:Resources>\n");
    }
    let inputs = job.input_files.iter().map(|f| (&f.name, &f.source, "input", "Source"));
    let outputs = job
        .output_files
        .iter()
        .map(|f| (&f.name, &f.target, "output", "Target"));
    for (name, uri, _, side) in inputs.chain(outputs) {
        x.push_str("    <jsdl:DataStaging>\n");
        el(&mut x, 6, "jsdl:FileName", name);
        el(&mut x, 6, "jsdl:CreationFlag", "overwrite");
        match uri {
            Some(uri) => x.push_str(&format!(
                "      <jsdl:{side}><jsdl:URI>{}</jsdl:URI></jsdl:{side}>\n",
                escape(uri)
            )),
            // Uploaded by the client, or left for the owner to fetch.
            None => x.push_str(&format!("      <jsdl:{side}/>\n")),
        }
        x.push_str("    </jsdl:DataStaging>\n");
    }
    x.push_str("  </jsdl:JobDescription>\n</jsdl:JobDefinition>\n");
    d.sizes("JSDL", job);
    d.unsupported(
        "JSDL",
        job,
        &[
            "container_image",
            "grid_resource",
            "retries",
            "priority",
            "notify",
            "script",
            "cpus_per_task",
            "gpus",
            "attributes",
            "reservation",
            "earliest_start",
            "deadline",
            "hold",
            "benchmarks",
            "requirements",
            "rank",
        ],
    );
    d.finish(x)
}
