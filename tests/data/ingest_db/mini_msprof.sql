-- A tiny msprof-style export, written by hand from the schema of the real samples
-- (../shared/samples/Ascend__msinsight/.../msprof_0.db, ascend_pytorch_profiler_0.db), with the variants the
-- reader must cope with: blockNum/mixBlockNum spellings, PMU times written in us (not ns), NULL shapes,
-- FORMAT_ prefixes, two steps with overlap analysis, one communication op, CANN API calls, memory records.
CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT);
INSERT INTO STRING_IDS VALUES
 (1, 'MatMul_1'), (2, 'MatMul'), (3, 'AI_CORE'), (4, 'FORMAT_ND;FORMAT_FRACTAL_NZ'), (5, 'FLOAT16;FLOAT16'),
 (6, '"128,256;256,64"'), (7, 'FORMAT_ND'), (8, 'FLOAT16'), (9, '"128,64"'),
 (10, 'Add_2'), (11, 'Add'), (12, 'AI_VECTOR_CORE'), (13, 'NULL'),
 (20, 'hcom_allReduce__1_0_1'), (21, 'hcom_allReduce_'), (22, 'group_a'),
 (30, 'aic_total_time'), (31, 'aic_mac_ratio'), (32, 'aiv_total_time'), (33, 'aiv_vec_ratio'),
 (34, 'aic_mte2_ratio'), (35, 'aiv_mte2_ratio'),
 (40, 'aclrtSynchronizeStream'), (41, 'launch'), (50, 'PTA'), (60, 'KERNEL_AICORE'), (61, 'EVENT_WAIT');
CREATE TABLE ENUM_API_TYPE (id INTEGER PRIMARY KEY, name TEXT);
INSERT INTO ENUM_API_TYPE VALUES (5000, 'runtime'), (10000, 'node'), (20000, 'acl');
CREATE TABLE TASK (startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER, globalTaskId INTEGER,
                   globalPid INTEGER, taskType INTEGER, contextId INTEGER, streamId INTEGER, taskId INTEGER,
                   modelId INTEGER, depth INTEGER);
INSERT INTO TASK VALUES
 (1000000000000, 1000000100000, 0, 1, 0, 7, 60, 4294967295, 2, 11, 4294967295, 0),
 (1000000200000, 1000000210000, 0, 2, 1, 7, 60, 4294967295, 2, 12, 4294967295, 0),
 (1000001000000, 1000001050500, 0, 3, 2, 7, 60, 4294967295, 2, 13, 7, 0),
 (1000001100000, 1000001100500, 0, 4, 3, 7, 61, 4294967295, 2, 14, 4294967295, 0);
CREATE TABLE COMPUTE_TASK_INFO (name INTEGER, globalTaskId INTEGER PRIMARY KEY, blockNum INTEGER,
                   mixBlockNum INTEGER, taskType INTEGER, opType INTEGER, inputFormats INTEGER,
                   inputDataTypes INTEGER, inputShapes INTEGER, outputFormats INTEGER, outputDataTypes INTEGER,
                   outputShapes INTEGER, waitNs INTEGER);
INSERT INTO COMPUTE_TASK_INFO VALUES
 (1, 0, 24, 0, 3, 2, 4, 5, 6, 7, 8, 9, 0),
 (10, 1, 48, 0, 12, 11, 7, 8, 13, 7, 8, 13, 100000),
 (1, 2, 24, 0, 3, 2, 4, 5, 6, 7, 8, 9, 2500);
CREATE TABLE TASK_PMU_INFO (globalTaskId INTEGER, name INTEGER, value NUMERIC);
INSERT INTO TASK_PMU_INFO VALUES
 (0, 30, 95.5), (0, 31, 0.8), (0, 34, 0.1),
 (1, 32, 9.0), (1, 33, 0.6), (1, 35, 0.7),
 (2, 30, 48.0), (2, 31, 0.75), (2, 34, 0.2);
CREATE TABLE COMMUNICATION_OP (opName INTEGER, startNs INTEGER, endNs INTEGER, connectionId INTEGER,
                   groupName INTEGER, opId INTEGER PRIMARY KEY, relay INTEGER, retry INTEGER, dataType INTEGER,
                   algType INTEGER, count NUMERIC, opType INTEGER, waitNs INTEGER);
INSERT INTO COMMUNICATION_OP VALUES (20, 1000000300000, 1000000700000, 5, 22, 1, 0, 0, 4, 0, 1024, 21, 150000);
CREATE TABLE STEP_TIME (id INTEGER, startNs INTEGER, endNs INTEGER);
INSERT INTO STEP_TIME VALUES (1, 999999900000, 1000000900000), (2, 1000000900000, 1000001200000);
CREATE TABLE OVERLAP_ANALYSIS (id INTEGER PRIMARY KEY AUTOINCREMENT, deviceId INTEGER, startNs INTEGER,
                   endNs INTEGER, type INTEGER);
INSERT INTO OVERLAP_ANALYSIS (deviceId, startNs, endNs, type) VALUES
 (0, 1000000000000, 1000000100000, 0), (0, 1000000200000, 1000000210000, 0),
 (0, 1000000300000, 1000000700000, 1), (0, 1000000300000, 1000000700000, 2),
 (0, 1000000700000, 1000000900000, 3),
 (0, 1000001000000, 1000001050500, 0), (0, 1000001050500, 1000001200000, 3);
CREATE TABLE CANN_API (startNs INTEGER, endNs INTEGER, type INTEGER, globalTid INTEGER, connectionId INTEGER,
                   name INTEGER, depth INTEGER);
INSERT INTO CANN_API VALUES
 (999999950000, 999999960000, 10000, 30064771079, 1, 41, 0),
 (1000000150000, 1000000160000, 10000, 30064771079, 2, 41, 0),
 (1000000800000, 1000000850000, 20000, 30064771079, 3, 40, 0);
CREATE TABLE MEMORY_RECORD (component INTEGER, timestamp INTEGER, totalAllocated INTEGER, totalReserved INTEGER,
                   totalActive INTEGER, streamPtr INTEGER, deviceId INTEGER);
INSERT INTO MEMORY_RECORD VALUES (50, 1000000000000, 1048576, 2097152, 1048576, 0, 0);
CREATE TABLE META_DATA (name TEXT, value TEXT);
INSERT INTO META_DATA VALUES ('SCHEMA_VERSION', '1.0.0'), ('ENV_VARIABLES', '{"HCCL_ALGO": "ring"}');
CREATE TABLE RANK_DEVICE_MAP (rankId INTEGER, deviceId INTEGER);
INSERT INTO RANK_DEVICE_MAP VALUES (3, 0);
CREATE TABLE NPU_INFO (id INTEGER, name TEXT);
INSERT INTO NPU_INFO VALUES (0, 'Ascend910B');
