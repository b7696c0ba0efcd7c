//! The web dashboard in a real browser: Debian's headless Chromium driven
//! through chromedriver (WebDriver) against a real `brokk serve`. It logs in
//! with a token, sees a job submitted through the API appear and finish
//! without a reload, and sees a reservation on its site's Gantt row and in
//! the reservations view, and a workflow's graph and tasks to its end. With
//! a million jobs stored, the first page is drawn within a second of the
//! login. Screenshots go to `target/browser-artifacts/`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{ClientBuilder, Locator};

mod common;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// chromedriver on a free port; killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn chromedriver() -> Driver {
    let port = common::free_port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver (Debian's chromium-driver)");
    let t = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "chromedriver did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    }
}

fn artifacts() -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/browser-artifacts"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A WebDriver session in headless Chromium.
async fn session(driver: &Driver) -> fantoccini::Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000"],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a WebDriver session in headless Chromium")
}

/// Runs `script` on the element `css` selects (`e` in it), in the page in
/// one step: the lists and the chart are redrawn every second, so an
/// element found in one call may be gone by the next ("stale element").
/// `null` when nothing matches.
async fn on(c: &fantoccini::Client, css: &str, script: &str) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let select = serde_json::to_string(css)?;
    let script = format!("const e = document.querySelector({select}); return e ? ({script}) : null;");
    Ok(c.execute(&script, vec![]).await?)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs Debian's chromium and chromium-driver; scripts/test.sh installs them and runs this"]
async fn the_dashboard_shows_jobs_live_and_reservations_on_the_gantt_chart() {
    let dir = common::scratch("dashboard", "live");
    std::fs::write(
        dir.join("broker.toml"),
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
         [[embedded]]\nname = \"alpha\"\ncapacity = 4\n[[embedded]]\nname = \"beta\"\ncapacity = 8\n",
    )
    .unwrap();
    let server = common::serve(&dir);
    let driver = chromedriver();
    let c = session(&driver).await;
    let result = async {
        // A wrong token is refused on the page.
        c.goto(&format!("{}/ui/", server.url)).await?;
        c.find(Locator::Css("#token")).await?.send_keys("not-a-token").await?;
        c.find(Locator::Css("#login-button")).await?.click().await?;
        let said = c
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::XPath("//p[@id='login-error'][contains(., 'not known')]"))
            .await?;
        assert!(said.text().await?.contains("not known"));
        c.find(Locator::Css("#token")).await?.clear().await?;
        c.find(Locator::Css("#token")).await?.send_keys("tok-ann").await?;
        c.find(Locator::Css("#login-button")).await?.click().await?;
        c.wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("#sites tr[data-site='beta']"))
            .await?;
        // Marks this page: a reload would lose the mark.
        c.execute("window.brokkMark = 'no reload'; return 1;", vec![]).await?;

        // Through the API, as a script would: a reservation, then a job.
        let soon = (chrono::Utc::now() + chrono::Duration::minutes(5)).to_rfc3339();
        let r = common::json(
            &server.url,
            "tok-ann",
            &["reserve", "--amount", "2", "--duration", "20m", "--earliest", &soon, "--json"],
        );
        let rid = r["id"].as_str().unwrap().to_string();
        let site = r["site"].as_str().unwrap().to_string();
        let job = dir.join("job.json");
        std::fs::write(
            &job,
            r#"{"name": "browser-test", "executable": "/bin/sh", "arguments": ["-c", "sleep 2; echo seen in the browser"], "wall_time": 60}"#,
        )
        .unwrap();
        let accepted = common::json(&server.url, "tok-ann", &["submit", job.to_str().unwrap(), "--json"]);
        let id = accepted["id"].as_str().unwrap().to_string();

        c.wait()
            .at_most(Duration::from_secs(15))
            .for_element(Locator::Css(&format!("#jobs tr[data-id='{id}']")))
            .await?;
        c.screenshot().await.map(|png| std::fs::write(artifacts().join("dashboard-submitted.png"), png))??;
        c.wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Css(&format!("#jobs tr[data-id='{id}'][data-state='finished']")))
            .await?;
        let mark = c.execute("return window.brokkMark;", vec![]).await?;
        assert_eq!(mark, serde_json::json!("no reload"), "the page was reloaded");
        // The reservation is drawn on its site's row of the Gantt chart.
        let bar = format!("#gantt rect.bar.reservation[data-id='{rid}']");
        c.wait()
            .at_most(Duration::from_secs(15))
            .for_element(Locator::Css(&bar))
            .await?;
        let html = on(&c, &bar, "e.outerHTML").await?;
        assert!(html.as_str().is_some_and(|h| h.contains(&rid)), "{html}");
        let class = on(&c, &format!("#gantt rect.bar.job[data-id='{id}']"), "e.getAttribute('class')").await?;
        assert!(class.as_str().is_some_and(|c| c.contains("finished")), "{class}");
        // The job's page shows its history and its output.
        on(&c, &format!("#jobs tr[data-id='{id}']"), "(e.click(), 1)").await?;
        let output = c
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::XPath("//pre[@id='d-output'][contains(., 'seen in the browser')]"))
            .await?;
        assert_eq!(output.text().await?.trim(), "seen in the browser");
        c.screenshot().await.map(|png| std::fs::write(artifacts().join("dashboard.png"), png))??;
        // Times in UTC when chosen: the history says its zone.
        c.find(Locator::Css("#zone option[value='UTC']")).await?.click().await?;
        c.wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::XPath("//ol[@id='d-history']/li[contains(., 'UTC')]"))
            .await?;
        // An ended job runs again from its page, under its own id.
        c.find(Locator::XPath("//div[@id='d-actions']/button[. = 'requeue']")).await?.click().await?;
        c.wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::XPath("//ol[@id='d-history']/li[contains(., 'requeued by its owner')]"))
            .await?;
        // Its second run ends as the first did, and the list follows it.
        let t = std::time::Instant::now();
        loop {
            let j = common::json(&server.url, "tok-ann", &["status", &id, "--json"]);
            let dispatched = j["history"].as_array().unwrap().iter().filter(|h| h["state"] == "dispatched").count();
            if dispatched == 2 && j["state"] == "finished" {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "second run not ended: {j}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        c.wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(&format!("#jobs tr[data-id='{id}'][data-state='finished']")))
            .await?;
        assert!(!site.is_empty());

        // The reservations view lists the reservation, at its site; a
        // state filter it does not match hides it.
        let row = format!("#reservations tr[data-id='{rid}']");
        c.wait()
            .at_most(Duration::from_secs(15))
            .for_element(Locator::Css(&row))
            .await?;
        let seen = on(&c, &row, "[e.innerText, e.dataset.state]").await?;
        let text = seen[0].as_str().unwrap_or_default();
        assert!(text.contains(&site) && text.contains('2'), "{text}");
        let kept = seen[1].as_str().unwrap_or_default().to_string();
        assert!(kept == "held" || kept == "committed", "{kept}");
        c.find(Locator::Css("#r-state option[value='cancelled']")).await?.click().await?;
        assert!(c.find(Locator::Css(&format!("#reservations tr[data-id='{rid}']"))).await.is_err());
        c.find(Locator::Css(&format!("#r-state option[value='{kept}']"))).await?.click().await?;
        c.find(Locator::Css(&format!("#reservations tr[data-id='{rid}']"))).await?;

        // A workflow: its row, then its graph (a diamond: four tasks, four
        // dependencies) and its tasks, followed to its end.
        for (node, after) in [("a", ""), ("b", "a"), ("c", "a"), ("d", "b c")] {
            std::fs::write(
                dir.join(format!("{node}.sub")),
                format!("executable = /bin/sh\narguments = \"-c 'sleep 1; echo {node} {after}'\"\nallowed_job_duration = 120\nqueue\n"),
            )?;
        }
        std::fs::write(
            dir.join("diamond.dag"),
            "JOB a a.sub\nJOB b b.sub\nJOB c c.sub\nJOB d d.sub\nPARENT a CHILD b c\nPARENT b c CHILD d\n",
        )?;
        let w = common::json(
            &server.url,
            "tok-ann",
            &["workflow", "submit", dir.join("diamond.dag").to_str().unwrap(), "--json"],
        );
        let wid = w["id"].as_str().unwrap_or_else(|| panic!("not admitted: {w}")).to_string();
        let wrow = format!("#workflows tr[data-id='{wid}']");
        c.wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css(&wrow))
            .await?;
        on(&c, &wrow, "(e.click(), 1)").await?;
        c.wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("#w-graph svg.dag g.task[data-task='d']"))
            .await?;
        assert_eq!(c.find_all(Locator::Css("#w-graph svg.dag g.task")).await?.len(), 4);
        assert_eq!(c.find_all(Locator::Css("#w-graph svg.dag line.edge")).await?.len(), 4);
        // d is drawn two layers below a.
        let y = |task: &'static str| {
            let c = c.clone();
            async move {
                let css = format!("#w-graph g.task[data-task='{task}'] rect");
                let y = on(&c, &css, "e.getAttribute('y')").await?;
                Ok::<f64, Box<dyn std::error::Error>>(y.as_str().unwrap_or_default().parse()?)
            }
        };
        let (ya, yb, yd) = (y("a").await?, y("b").await?, y("d").await?);
        assert!(ya < yb && yb < yd, "layers {ya} {yb} {yd}");
        c.wait()
            .at_most(Duration::from_secs(60))
            .for_element(Locator::Css(&format!("#workflows tr[data-id='{wid}'][data-state='finished']")))
            .await?;
        c.wait()
            .at_most(Duration::from_secs(15))
            .for_element(Locator::Css("#w-graph g.task.state-finished[data-task='d']"))
            .await?;
        c.execute("document.getElementById('wf-detail').scrollIntoView(); return 1;", vec![])
            .await?;
        let graph = c.find(Locator::Css("#wf-detail")).await?;
        graph.screenshot().await.map(|png| std::fs::write(artifacts().join("dashboard-workflow.png"), png))??;
        c.execute(
            "document.getElementById('reservations').closest('section').scrollIntoView(); return 1;",
            vec![],
        )
        .await?;
        let view = c.find(Locator::Css("#reservations")).await?.find(Locator::XPath("./..")).await?;
        view.screenshot().await.map(|png| std::fs::write(artifacts().join("dashboard-reservations.png"), png))??;
        // A task's row opens its job.
        c.find(Locator::Css("#w-tasks tr[data-task='d']")).await?.click().await?;
        c.wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::XPath("//pre[@id='d-output'][contains(., 'd b c')]"))
            .await?;

        // Five thousand jobs (five arrays, held): the list shows them a
        // page of a hundred at a time, in the service's order.
        let array = dir.join("array.sh");
        std::fs::write(&array, "#!/bin/sh\n#SBATCH --array=1-1000\n#SBATCH --time=1\necho $SLURM_ARRAY_TASK_ID\n")?;
        for _ in 0..5 {
            common::json(&server.url, "tok-ann", &["submit", "--hold", array.to_str().unwrap(), "--json"]);
        }
        c.refresh().await?;
        c.wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::XPath("//span[@id='page'][. = 'jobs 1-100']"))
            .await?;
        for _ in 0..3 {
            c.find(Locator::Css("#older")).await?.click().await?;
        }
        c.wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::XPath("//span[@id='page'][. = 'jobs 301-400']"))
            .await?;
        // Read at once: the rows are redrawn every second.
        let shown: Vec<String> = serde_json::from_value(
            c.execute(
                "return [...document.querySelectorAll('#jobs tbody tr')].map((r) => r.dataset.id);",
                vec![],
            )
            .await?,
        )?;
        let listed = common::json(&server.url, "tok-ann", &["status", "--json", "--limit", "400"]);
        let expected: Vec<String> = listed.as_array().unwrap()[300..400]
            .iter()
            .map(|j| j["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(shown, expected, "page 4 is not the service's jobs 301-400");
        c.find(Locator::Css("#newer")).await?.click().await?;
        c.wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::XPath("//span[@id='page'][. = 'jobs 201-300']"))
            .await?;

        // The schedule zooms in around its centre and pans.
        let span = |c: fantoccini::Client| async move {
            let g = c.find(Locator::Css("#gantt")).await?;
            Ok::<(f64, f64), Box<dyn std::error::Error>>((
                g.attr("data-span").await?.unwrap_or_default().parse()?,
                g.attr("data-mid").await?.unwrap_or_default().parse()?,
            ))
        };
        let (before, mid) = span(c.clone()).await?;
        c.find(Locator::Css("#zoom-in")).await?.click().await?;
        let (zoomed, same_mid) = span(c.clone()).await?;
        assert!((zoomed - before / 2.0).abs() <= 1.0, "{before} -> {zoomed}");
        assert!((same_mid - mid).abs() <= 1.0);
        c.find(Locator::Css("#pan-right")).await?.click().await?;
        let (_, later) = span(c.clone()).await?;
        assert!((later - (mid + zoomed / 2.0)).abs() <= 1.0, "{mid} -> {later}");
        Ok::<_, Box<dyn std::error::Error>>(())
    }
    .await;
    let _ = c.close().await;
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Jobs a long-lived broker holds: a million, as the soak leaves them.
const MILLION: u32 = 1_000_000;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs Debian's chromium and chromium-driver; scripts/test.sh installs them and runs this"]
async fn the_first_page_of_a_million_stored_jobs_renders_within_a_second() {
    let dir = common::scratch("dashboard", "million");
    std::fs::write(
        dir.join("broker.toml"),
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
         [[embedded]]\nname = \"alpha\"\ncapacity = 4\n",
    )
    .unwrap();
    // The broker makes its schema; a million ended jobs of ann's then go
    // straight into its table, one a second, as a soak leaves them.
    drop(common::serve(&dir));
    let written = std::time::Instant::now();
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}", dir.join("broker.db").display()))
        .await
        .unwrap();
    sqlx::query(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {MILLION})
         INSERT INTO jobs (id, owner, format, spec, prefs, warnings, state, site, site_job, submitted, started, ended,
                           exit_code, member)
         SELECT printf('%016x', i), 'ann', 'json', '{{\"name\": \"soak\", \"executable\": \"/bin/true\"}}', '{{}}', '[]',
                'finished', 'alpha', CAST(i AS TEXT), 1700000000 + i, 1700000000 + i, 1700000001 + i, 0,
                '{{\"kind\":\"alone\"}}' FROM n"
    ))
    .execute(&db)
    .await
    .unwrap();
    db.close().await;
    eprintln!("{MILLION} jobs written in {:.1?}", written.elapsed());
    let started = std::time::Instant::now();
    let server = common::serve(&dir);
    eprintln!("the broker answers {:.1?} after its start", started.elapsed());
    let driver = chromedriver();
    let c = session(&driver).await;
    let result = async {
        c.goto(&format!("{}/ui/", server.url)).await?;
        c.find(Locator::Css("#token")).await?.send_keys("tok-ann").await?;
        let asked = std::time::Instant::now();
        c.find(Locator::Css("#login-button")).await?.click().await?;
        // The newest job first: the millionth.
        let newest = format!("{MILLION:016x}");
        c.wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Css(&format!("#jobs tbody tr[data-id='{newest}']")))
            .await?;
        let first = asked.elapsed();
        c.wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::XPath("//span[@id='page'][. = 'jobs 1-100']"))
            .await?;
        // Deep pages are as quick: each asks for the jobs after the last shown.
        let paged = std::time::Instant::now();
        for _ in 0..3 {
            c.find(Locator::Css("#older")).await?.click().await?;
        }
        c.wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::XPath("//span[@id='page'][. = 'jobs 301-400']"))
            .await?;
        let three = paged.elapsed();
        let last = format!("{:016x}", MILLION - 399);
        c.find(Locator::Css(&format!("#jobs tbody tr[data-id='{last}']")))
            .await?;
        // Sorted by the service: by end, the oldest first after a second click.
        let sorting = std::time::Instant::now();
        c.find(Locator::Css("#jobs th[data-sort='ended']"))
            .await?
            .click()
            .await?;
        c.find(Locator::Css("#jobs th[data-sort='ended']"))
            .await?
            .click()
            .await?;
        let oldest = format!("{:016x}", 1);
        c.wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::XPath(&format!(
                "//table[@id='jobs']/tbody/tr[1][@data-id='{oldest}']"
            )))
            .await?;
        let sorted = sorting.elapsed();
        let heading = c.find(Locator::Css("#jobs th.sorted")).await?.text().await?;
        assert_eq!(heading, "ended ▲");
        c.wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::XPath("//span[@id='page'][. = 'jobs 1-100']"))
            .await?;
        eprintln!(
            "with {MILLION} jobs stored: first page {first:.2?} after the login, three pages older {three:.2?}, \
             sorted by end oldest first {sorted:.2?} after the clicks"
        );
        assert!(first < Duration::from_secs(1), "the first page took {first:?}");
        Ok::<_, Box<dyn std::error::Error>>(())
    }
    .await;
    let _ = c.close().await;
    // A quarter of a gigabyte: not left behind.
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = result {
        panic!("{e}");
    }
}
