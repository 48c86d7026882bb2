/*
 * collate/slot.c: a GPU decoder's task plan and the slot's room. Every
 * sample gets room in the task's share of the data area, in order, without
 * overlap; files larger than a sample go to the GPU while the share has
 * room, and the largest go to the CPU first when it has not. A larger room
 * per sample (FEEDER_OPT_GPU_ROOM) keeps more of them on the GPU.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "collate/slot.h"
#include "feeder.h"

/* The plan of a task of n samples of sb bytes, each with `room` bytes. */
static void plan(size_t sb, size_t room, uint32_t n, const size_t *len, int *gpu, uint64_t *off,
                 uint32_t *moved)
{
    feeder__slot_layout l = {.sample_bytes = sb, .room_bytes = room};
    feeder__slot_plan_part(&l, n, len, gpu, off, moved);
}

/* The plan's invariants: offsets in order, no overlap, all inside the share. */
static void check_plan(size_t sb, size_t room, uint32_t n, const size_t *len, const int *gpu,
                       const uint64_t *off)
{
    uint64_t at = 0;
    for (uint32_t k = 0; k < n; k++) {
        ck_assert_uint_eq(off[k], at);
        at += gpu[k] ? len[k] : sb;
    }
    ck_assert_uint_le(at, (uint64_t)n * room);
}

START_TEST(small_files_pack_and_leave_room)
{
    size_t len[4] = {100, 50, 400, 30};
    int gpu[4] = {1, 1, 1, 1};
    uint64_t off[4];
    uint32_t moved;
    plan(200, 200, 4, len, gpu, off, &moved);
    ck_assert_uint_eq(moved, 0); /* 580 <= 800: the 400-byte file fits */
    ck_assert_int_eq(gpu[2], 1);
    ck_assert_uint_eq(off[0], 0);
    ck_assert_uint_eq(off[1], 100);
    ck_assert_uint_eq(off[2], 150);
    ck_assert_uint_eq(off[3], 550);
    check_plan(200, 200, 4, len, gpu, off);
}
END_TEST

START_TEST(largest_move_to_the_cpu_first)
{
    size_t len[5] = {900, 150, 700, 10, 800};
    int gpu[5] = {1, 1, 1, 0, 1};
    uint64_t off[5];
    uint32_t moved;
    /* share 5 x 200 = 1000; needs 900+150+700+200+800 = 2750. Moving 900
     * (to 200) leaves 2050, 800 leaves 1450, 700 leaves 950: fits. */
    plan(200, 200, 5, len, gpu, off, &moved);
    ck_assert_uint_eq(moved, 3);
    ck_assert_int_eq(gpu[0], 0);
    ck_assert_int_eq(gpu[1], 1);
    ck_assert_int_eq(gpu[2], 0);
    ck_assert_int_eq(gpu[3], 0);
    ck_assert_int_eq(gpu[4], 0);
    check_plan(200, 200, 5, len, gpu, off);
}
END_TEST

START_TEST(room_of_their_own_keeps_large_files)
{
    size_t len[5] = {900, 150, 700, 10, 800};
    int gpu[5] = {1, 1, 1, 0, 1};
    uint64_t off[5];
    uint32_t moved;
    /* The same task with 400 bytes of room a sample: share 2000. Moving 900
     * (to 200) leaves 2050, 800 leaves 1450: fits, and 700 stays. */
    plan(200, 400, 5, len, gpu, off, &moved);
    ck_assert_uint_eq(moved, 2);
    ck_assert_int_eq(gpu[0], 0);
    ck_assert_int_eq(gpu[1], 1);
    ck_assert_int_eq(gpu[2], 1);
    ck_assert_int_eq(gpu[3], 0);
    ck_assert_int_eq(gpu[4], 0);
    ck_assert_uint_eq(off[2], 350); /* 200 (pixels) + 150 */
    ck_assert_uint_eq(off[3], 1050);
    check_plan(200, 400, 5, len, gpu, off);
    /* 900 bytes each: nothing moves. */
    int all[5] = {1, 1, 1, 0, 1};
    plan(200, 900, 5, len, all, off, &moved);
    ck_assert_uint_eq(moved, 0);
    ck_assert_uint_eq(off[4], 900 + 150 + 700 + 200);
}
END_TEST

START_TEST(random_plans_always_fit)
{
    srand(7);
    for (int rep = 0; rep < 2000; rep++) {
        uint32_t n = 1 + (uint32_t)(rand() % 40);
        size_t sb = 1 + (size_t)(rand() % 5000);
        size_t room = sb + (rand() % 2 ? (size_t)(rand() % 5000) : 0);
        size_t len[40];
        int gpu[40];
        uint64_t off[40];
        for (uint32_t k = 0; k < n; k++) {
            len[k] = 1 + (size_t)(rand() % (int)(sb * 4));
            gpu[k] = rand() % 4 != 0;
        }
        int before[40];
        for (uint32_t k = 0; k < n; k++)
            before[k] = gpu[k];
        uint32_t moved;
        plan(sb, room, n, len, gpu, off, &moved);
        check_plan(sb, room, n, len, gpu, off);
        uint32_t changed = 0;
        for (uint32_t k = 0; k < n; k++) {
            ck_assert(!gpu[k] || before[k]);         /* nothing joins the GPU */
            ck_assert(gpu[k] || !before[k] || len[k] > sb); /* only large ones leave */
            changed += before[k] && !gpu[k];
        }
        ck_assert_uint_eq(changed, moved);
    }
}
END_TEST

START_TEST(layout_has_a_place_per_sample)
{
    feeder__slot_layout l;
    ck_assert_int_eq(feeder__slot_layout_init(&l, 256, 224, 224, 3, 0), 0);
    ck_assert_uint_eq(l.encoded_off, 256 * 16);
    ck_assert_uint_eq(l.data_off, 8192); /* 256 x 32 bytes of metadata, a page multiple */
    uint8_t *slot = malloc(l.data_off);
    ck_assert_ptr_eq(feeder__slot_place(&l, slot), (uint64_t *)(slot + 256 * 24));
    ck_assert_ptr_eq(feeder__slot_encoded(&l, slot), (uint64_t *)(slot + 256 * 16));
    free(slot);
}
END_TEST

START_TEST(room_grows_the_data_area)
{
    feeder__slot_layout l;
    ck_assert_int_eq(feeder__slot_layout_init(&l, 256, 224, 224, 3, 0), 0);
    ck_assert_uint_eq(l.room_bytes, 150528);
    ck_assert_uint_eq(l.slot_bytes, 8192 + 9408 * 4096); /* 256 x 150528, whole pages */
    ck_assert_int_eq(feeder__slot_layout_room(&l, 192 * 1024), 0);
    ck_assert_uint_eq(l.room_bytes, 196608);
    ck_assert_uint_eq(l.slot_bytes, 8192 + 256 * 196608);
    ck_assert_uint_eq(l.sample_bytes, 150528); /* pixels keep their size */
    ck_assert_uint_eq(l.data_off, 8192);
    ck_assert_int_eq(feeder__slot_layout_room(&l, 1), 0); /* under a sample: a sample */
    ck_assert_uint_eq(l.room_bytes, 150528);
    ck_assert_uint_eq(l.slot_bytes, 8192 + 9408 * 4096);
    /* An overflow leaves the layout as it was. */
    ck_assert_int_eq(feeder__slot_layout_room(&l, SIZE_MAX / 128), FEEDER_EOVERFLOW);
    ck_assert_uint_eq(l.room_bytes, 150528);
    ck_assert_uint_eq(l.slot_bytes, 8192 + 9408 * 4096);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("slot");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, small_files_pack_and_leave_room);
    tcase_add_test(tc, largest_move_to_the_cpu_first);
    tcase_add_test(tc, room_of_their_own_keeps_large_files);
    tcase_add_test(tc, random_plans_always_fit);
    tcase_add_test(tc, layout_has_a_place_per_sample);
    tcase_add_test(tc, room_grows_the_data_area);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
