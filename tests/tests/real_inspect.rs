//! `spool ls` and `spool cat` against the real servers `cargo xtask test`
//! starts: a ClickHouse catalog (a fresh database, dropped at the end) and
//! moto's S3 (a fresh prefix in the test bucket, emptied at the end).
#![forbid(unsafe_code)]

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use spool_tests::inspect::{pack_and_row, put_and_index};
use spool_tests::{describe, output, spool};
use spool_upload::Store;

#[test]
fn ls_and_cat_read_back_from_clickhouse_and_s3_and_cat_catches_a_corrupt_object() {
    let Some((ch, endpoint, bucket)) = spool_tests::servers::clickhouse_and_s3() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (catalog_url, admin) = spool_tests::servers::fresh_clickhouse(&ch);
    let prefix = format!("inspect-{}", uuid::Uuid::new_v4().simple());
    let s3: Arc<dyn ObjectStore> = Arc::new(
        object_store::aws::AmazonS3Builder::from_env()
            .with_endpoint(&endpoint)
            .with_allow_http(true)
            .with_bucket_name(&bucket)
            .build()
            .unwrap(),
    );
    let store = Store::new(s3.clone(), &prefix, "moto", true).unwrap();
    let catalog = spool_catalog::open(&catalog_url).unwrap();

    // Two packs, stored and indexed as a service would.
    let now = spool_core::pack::now_ms();
    let mut packs = Vec::new();
    for (i, ms) in [now - 7_200_000, now - 60_000].into_iter().enumerate() {
        let records = [0, 1].map(|r| format!("pack {i} record {r}").into_bytes());
        let (id, bytes, row) = pack_and_row(&store, ms, &records);
        rt.block_on(put_and_index(&store, catalog.as_ref(), &bytes, &row));
        packs.push((id, object_store::path::Path::from(row.object_key), bytes));
    }
    let store_url = format!("s3://{bucket}/{prefix}");
    let with_s3 = |cmd: &mut std::process::Command| {
        cmd.env("AWS_ENDPOINT", &endpoint)
            .env("AWS_ALLOW_HTTP", "true");
    };

    let out = output(spool().args(["ls", "--json", "--catalog", &catalog_url]));
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    let out = output(spool().args(["ls", "--since", "1h", "--json", "--catalog", &catalog_url]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(text.lines().count(), 1, "{}", describe(&out));
    assert!(text.contains(&packs[1].0.to_hex()), "{text}");

    let tmp = tempfile::tempdir().unwrap();
    let out_file = tmp.path().join("pack");
    let mut cmd = spool();
    cmd.args(["cat", &packs[1].0.to_hex(), "--catalog", &catalog_url])
        .args(["--store", &store_url, "--out"])
        .arg(&out_file);
    with_s3(&mut cmd);
    let out = output(&mut cmd);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(std::fs::read(&out_file).unwrap(), packs[1].2);

    // A pack inside a larger object (another's bytes before it, padding
    // after): its row names its range, `ls` shows it, and `cat` reads it
    // with one ranged GET from moto and checks it.
    let records = [b"bundled record".to_vec()];
    let (id, bytes, mut row) = pack_and_row(&store, now - 30_000, &records);
    let mut object = vec![0x5a; 3001];
    object.extend_from_slice(&bytes);
    object.extend_from_slice(&[0xa5; 500]);
    row.object_key = format!("{prefix}/v2/bundles/{}.bundle", id.to_hex());
    row.object_offset = 3001;
    rt.block_on(async {
        s3.put(&row.object_key.as_str().into(), object.into())
            .await
            .unwrap();
        catalog
            .index(std::slice::from_ref(&row), None)
            .await
            .unwrap();
    });
    let out = output(spool().args(["ls", "--json", "--catalog", &catalog_url]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.contains(&id.to_hex()) && l.contains("\"object_offset\":3001")),
        "{text}"
    );
    let bundled_out = tmp.path().join("bundled");
    let mut cmd = spool();
    cmd.args(["cat", &id.to_hex(), "--catalog", &catalog_url])
        .args(["--store", &store_url, "--out"])
        .arg(&bundled_out);
    with_s3(&mut cmd);
    let out = output(&mut cmd);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(std::fs::read(&bundled_out).unwrap(), bytes);

    // A row whose range starts past its object's end: moto answers the
    // ranged GET with 416; `cat` exits 9 naming both sizes, not 1 with the
    // server's XML.
    let object_len = 3001 + bytes.len() as u64 + 500;
    let mut past = row.clone();
    past.object_offset = object_len + 64;
    rt.block_on(catalog.index(std::slice::from_ref(&past), None))
        .unwrap();
    let past_out = tmp.path().join("past");
    let mut cmd = spool();
    cmd.args(["cat", &id.to_hex(), "--catalog", &catalog_url])
        .args(["--store", &store_url, "--out"])
        .arg(&past_out);
    with_s3(&mut cmd);
    let out = output(&mut cmd);
    assert_eq!(out.status.code(), Some(9), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let end = past.object_offset + past.bytes;
    assert!(err.contains(&format!("ends at byte {end}")), "{err}");
    assert!(
        err.contains(&format!("the object is {object_len} bytes long")),
        "{err}"
    );
    assert!(!past_out.exists());

    // The object replaced behind the catalog's back: exit 9, nothing written.
    let mut bad = packs[0].2.clone();
    bad[44] ^= 0x40;
    rt.block_on(s3.put(&packs[0].1, bad.into())).unwrap();
    let bad_out = tmp.path().join("bad");
    let mut cmd = spool();
    cmd.args(["cat", &packs[0].0.to_hex(), "--catalog", &catalog_url])
        .args(["--store", &store_url, "--out"])
        .arg(&bad_out);
    with_s3(&mut cmd);
    let out = output(&mut cmd);
    assert_eq!(out.status.code(), Some(9), "{}", describe(&out));
    assert!(!bad_out.exists());

    rt.block_on(async {
        let keys: Vec<_> = s3
            .list(Some(&prefix.as_str().into()))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .unwrap();
        for k in keys {
            s3.delete(&k).await.unwrap();
        }
        admin.testing_drop_database().await.unwrap();
    });
}

/// A typo in a ClickHouse URL's database or table prefix never makes an
/// empty catalog: `ls`, `cat`, `sweep` (even `--dry-run`) and `reindex
/// --dry-run` are refused naming what is missing, and the server has no
/// such database or table afterwards.
#[test]
fn read_commands_refuse_a_catalog_that_does_not_exist_and_create_nothing() {
    let Some((ch, endpoint, bucket)) = spool_tests::servers::clickhouse_and_s3() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (catalog_url, admin) = spool_tests::servers::fresh_clickhouse(&ch);
    // the catalog exists (a service indexed into it): its table prefix
    // misspelled is another catalog
    rt.block_on(spool_catalog::open(&catalog_url).unwrap().ensure_schema())
        .unwrap();
    let typo_prefix = catalog_url.replace("table_prefix=", "table_prefix=typo_");
    let typo_db = {
        let (url, _) = spool_tests::servers::fresh_clickhouse(&ch);
        url
    };
    let store_url = format!("s3://{bucket}/typo-{}", uuid::Uuid::new_v4().simple());
    for url in [&typo_db, &typo_prefix] {
        for args in [
            vec!["ls", "--json"],
            vec![
                "cat",
                "0123456789abcdef0123456789abcdef",
                "--store",
                &store_url,
            ],
            vec!["sweep", "--dry-run", "--store", &store_url],
            vec!["sweep", "--store", &store_url],
            vec!["reindex", "--dry-run", "--store", &store_url],
        ] {
            let out = output(
                spool()
                    .args(&args)
                    .args(["--catalog", url])
                    .env("AWS_ENDPOINT", &endpoint)
                    .env("AWS_ALLOW_HTTP", "true"),
            );
            assert!(!out.status.success(), "{args:?}: {}", describe(&out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("does not exist") && err.contains("nothing was created"),
                "{args:?}: {err}"
            );
        }
    }
    // nothing was made: each still does not exist
    for url in [&typo_db, &typo_prefix] {
        let c = spool_catalog::open_existing(url, std::time::Duration::from_secs(10)).unwrap();
        let e = rt.block_on(c.ensure_schema()).unwrap_err();
        assert!(
            matches!(e, spool_catalog::Error::NoCatalog { .. }),
            "{url}: {e}"
        );
    }
    rt.block_on(admin.testing_drop_database()).unwrap();
}
